// Calibration: the few corrections `tessel calibrate` fits to measured runs, held as a
// quantity of the profile (meta "calibration") so that planner and simulator read them
// through the same CostLookup and hold no correction constant of their own. Each
// parameter's default leaves every prediction bit for bit as it was without it
// (scales of exactly 1, overheads of exactly 0), so nothing changes until a calibrated
// profile is used. Which parameters exist was chosen from the residuals of the
// published corpus (docs/ARCHITECTURE.md, "Calibration"):
//  - gemm_efficiency_scale: the datasheet GEMM curve's efficiency times this (GEMM and
//    attention time divided by it); real per-rank shapes run below the assumed curve.
//  - attention_efficiency_scale: attention's score and context products (materialised
//    batched GEMMs or a fused flash-style kernel) are the GEMM curve's time divided by
//    it, in place of the GEMM scale: fused kernels do not run at GEMM rates.
//  - memory_efficiency_scale: streaming (memory-bound) time divided by it; the model
//    omits or undercounts ops such as dropout, bias adds, masks and casts.
//  - intra_bus_efficiency, inter_bus_efficiency: collective bandwidth inside a node and
//    between nodes times these.
//  - overlap_efficiency: the fraction of the backward pass that can hide gradient
//    reduction and ZeRO gathers (1 = all of it).
//  - collective_contention: the fraction of compute speed lost while a data-parallel
//    collective (gradient sync, ZeRO gathers) runs hidden beside it: NCCL's kernels
//    take SMs and memory bandwidth from the GEMMs they overlap, so hidden traffic is not
//    free; each hidden second costs this many seconds of compute (0 = free, as before).
//    Host-device copies (offload) run on copy engines and pay none. The simulator pays
//    it and overlap_efficiency on the same overlap (simulator/src/compute_contention.hpp).
//  - tp_overlap_efficiency, tp_overlap_gemm_slowdown: plans with parallel.tp_comm_overlap
//    (Megatron's --tp-comm-overlap) pipeline each sequence-parallel gather and scatter
//    with the GEMM beside it (tp_overlap.hpp): the fraction of the pipelinable transfer
//    the GEMM hides, and the fraction by which that GEMM runs longer while the transfer
//    takes SMs from it. Their defaults are not "no correction" but the datasheet's view
//    (calibration.cpp says why); plans without the option never read them.
//  - layer_overhead_s: fixed seconds per transformer layer per micro-batch forward
//    (backward pays twice): kernel launches and framework work per layer.
//  - collective_call_overhead_s: fixed seconds every collective call pays beyond its
//    alpha-beta time: a blocking call ends only when every member is running, so ranks
//    that share cores (with each other or with other programs) wait for a partner's
//    turn on a core (the CPU suite's tensor-parallel all-reduces, hundreds of times
//    their alpha-beta time); on GPUs, the launch and framework work of each call.
//    On GPUs it is bounded by a physical figure (Parameter::gpu_upper, cited in
//    gpu_upper_source): a GPU's collective call costs its alpha-beta time plus NCCL's
//    fixed per-call latency and a kernel launch, tens of microseconds, never
//    milliseconds; the GPU rows of the corpus are mostly FSDP, which issues a fixed
//    number of calls per layer, so there the call overhead is collinear with
//    layer_overhead_s and the rows cannot identify it. A bound was chosen over refusing
//    to fit it: runs with tensor or pipeline parallelism (many calls per layer) can
//    identify it, and a bound keeps what they say within what the hardware allows.
//  - megatron_memory_factor: plans whose train.framework is megatron (Megatron-LM,
//    Megatron Core, NeMo) run their memory-bound ops at the device's memory scale times
//    this. The frameworks fuse differently: Megatron fuses bias-GeLU, bias-dropout-add and
//    the masked softmax and runs Transformer Engine's fused layers, while eager PyTorch
//    runs each elementwise op as a kernel of its own. Before calibration the corpus shows
//    it: the datasheet model's signed mean error on the H100 calibration rows is -31.4% for
//    eager PyTorch's and +3.1% for Megatron-LM's and NeMo's (`tessel calibrate` prints it
//    per framework; docs/BENCHMARKS.md, "Fidelity"). Fitted only
//    where the fitted rows hold megatron and pytorch rows; the memory scale is then the
//    pytorch rows'.
//  - compiled_memory_factor: the same for train.framework torch.compile (beside pytorch
//    rows), whose Inductor
//    kernels fuse the elementwise ops eager PyTorch runs one by one: torchtitan's Llama
//    3.1 8B on 8 H100s trains 16% faster with torch.compile than without (5,762 against
//    6,667 tokens/s/GPU, docs/performance.md Table 1, its rows in corpus/published).
//  - unfused_attention_factor: plans whose train.kernels is unfused (materialised scores:
//    batched GEMMs around a softmax) run attention at the device's attention scale times
//    this; fused (flash-style) kernels at the scale itself. One scale could not hold both:
//    fitted on A100 rows of both kinds it stood for whichever kind had more rows. Fitted
//    only where the fitted rows hold both kinds.
//    (Transformer Engine's attention guide says cuDNN's fused attention runs "20-50%"
//    faster than flash-attention on Hopper, docs/examples/attention/attention.ipynb,
//    section 1.3; a megatron factor on the attention scale, fitted on the H100 rows, came
//    out at 0.85-0.99, so the corpus does not show it and tessel keeps no such parameter.)
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "tessel/core/enums.hpp"
#include "tessel/core/json_fields.hpp"

namespace tessel::profiles {

struct Profile;

struct Calibration {
  double gemm_efficiency_scale = 1.0;
  double memory_efficiency_scale = 1.0;
  double attention_efficiency_scale = 1.0;
  double intra_bus_efficiency = 1.0;
  double inter_bus_efficiency = 1.0;
  double overlap_efficiency = 1.0;
  double layer_overhead_s = 0.0;
  double collective_call_overhead_s = 0.0;
  double collective_contention = 0.0;
  double tp_overlap_efficiency = 1.0;
  double tp_overlap_gemm_slowdown = 0.09;
  double megatron_memory_factor = 1.0;
  double unfused_attention_factor = 1.0;
  double compiled_memory_factor = 1.0;

  // One fitted parameter: its name in JSON, the range a fit may search, and where it lives.
  // gpu_upper bounds it on GPU devices, where a physical limit is known and cited in
  // gpu_upper_source (the same as upper where none is needed).
  struct Parameter {
    std::string_view name;
    double lower, upper;
    double Calibration::*field;
    double gpu_upper;
    std::string_view gpu_upper_source;
    // The largest value a fit may give it on a device of this kind ("gpu", "cpu").
    double upper_for(std::string_view device_kind) const { return device_kind == "gpu" ? gpu_upper : upper; }
  };
  static constexpr std::size_t kParameterCount = 14;
  static const std::array<Parameter, kParameterCount>& parameters();
  // "gemm_efficiency_scale, memory_efficiency_scale, ...": every name, for error messages.
  static std::string parameter_names();
  // The calibration a plan of this framework and these kernels is priced with: the memory
  // scale times megatron_memory_factor for megatron (compiled_memory_factor for
  // torch.compile), the attention scale times
  // unfused_attention_factor for unfused kernels; the factors themselves back at 1.
  Calibration for_plan(Framework framework, Kernels kernels) const;

  bool is_default() const { return *this == Calibration{}; }
  // {"gemm_efficiency_scale": ..., ...}; every key optional, each within its range.
  static Calibration from_json(const Json& json, const std::string& path);
  Json to_json() const;
  bool operator==(const Calibration&) const = default;
};

// The profile's calibration (meta "calibration" -> "parameters"), or the defaults.
Calibration calibration_of(const Profile& profile);

// Whether the profile was written by calibration (meta source "calibrated").
bool is_calibrated(const Profile& profile);

// One line saying which profile a prediction uses, e.g. "profile: H100-SXM calibrated on
// 83 published runs" or "profile: H100-SXM (datasheet)".
std::string describe_profile(const Profile& profile);

}  // namespace tessel::profiles
