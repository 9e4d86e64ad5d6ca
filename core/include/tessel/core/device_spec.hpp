// One accelerator (or CPU): peak rates per precision and memory. Each number carries
// its source (datasheet, assumed, measured) in `sources`. It is the "device" part of a
// profile (profiles/data/ ships datasheet ones); the kernel and link samples that say
// how fast it really runs live beside it in the profile.
#pragma once

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "tessel/core/enums.hpp"
#include "tessel/core/json_fields.hpp"

namespace tessel {

struct DeviceSpec {
  std::string name;
  std::string kind;  // gpu | cpu
  // Dense peak rates; tf32 is the rate fp32 GEMMs reach on tensor cores.
  double peak_fp32_flops_per_s = 0;
  double peak_tf32_flops_per_s = 0;
  double peak_bf16_flops_per_s = 0;
  double peak_fp16_flops_per_s = 0;
  // fp8 (e4m3/e5m2) tensor cores; 0 where the device has none (A100, CPUs): such a
  // device refuses fp8 training (check_precision).
  double peak_fp8_flops_per_s = 0;
  double memory_bytes = 0;
  double memory_bandwidth_bytes_per_s = 0;
  double memory_efficiency = 0;  // achievable fraction of memory bandwidth
  double workspace_bytes = 0;    // runtime, library workspace and allocator slack
  // CPU devices: what loading the CUDA libraries adds to every rank's resident set, in a
  // build that links them even when it trains on the CPU (runtime_bytes counts it there).
  double cuda_libraries_bytes = 0;
  // Mixture-of-Experts: tokens the busiest expert-parallel rank receives over the mean
  // (1 = perfectly balanced routing). Its source goes in `sources` like every number;
  // absent from a profile it is 1.0 and not written back.
  double moe_load_imbalance = 1.0;
  // CPU devices: the cores of the machine whose ranks share them (a CPU "device" is one
  // rank on one core). More ranks on a node than cores take turns, and predictions
  // say so (profiles/cost_lookup.hpp). 0 = not stated (GPUs): absent from JSON.
  int cores = 0;
  Json sources;

  double peak_flops_per_s(Precision precision) const;
  // The runtime a process of this build adds beside its tensors: workspace_bytes, plus
  // cuda_libraries_bytes where this build links the CUDA libraries.
  double runtime_bytes() const;
  bool has_fp8() const { return peak_fp8_flops_per_s > 0; }
  // Throws tessel::Error, one line naming the device, when it cannot train in
  // `precision` (fp8 without fp8 tensor cores).
  void check_precision(Precision precision) const;

  static DeviceSpec from_json(const Json& json, const std::string& path = "device");
  Json to_json() const;
  bool operator==(const DeviceSpec&) const = default;
};

// Whether this build links the CUDA libraries (the CUDA backend was built).
bool build_links_cuda_libraries();

// The device of a shipped profile (A100-SXM-80GB, A100-SXM-40GB, H100-SXM, H200, local-cpu), or of a
// profile JSON file.
DeviceSpec resolve_device(const std::string& preset_or_file);

}  // namespace tessel
