// What the analytic model predicts for one plan: step time and where it goes, memory
// per device and its parts, and the bytes and messages each rank sends per step.
#pragma once

#include <array>
#include <string_view>

#include "tessel/core/json_fields.hpp"
#include "tessel/core/parallel_config.hpp"
#include "tessel/core/plan.hpp"

namespace tessel::planner {

// Where step time goes. The parts add up to the step time: per-micro-batch work
// times the micro-batch count, then the pipeline bubble and the per-step tail.
enum class TimeKind {
  gemm,          // linear layers and the LM head
  attention,     // score and context batched GEMMs
  elementwise,   // norms, activations, residuals, softmax, cross-entropy, embedding
  recompute,     // forward work redone in backward
  tp_comm,       // tensor-parallel collectives (1D all-reduce, SUMMA broadcasts, 3D gathers)
  sp_comm,       // ring self-attention key/value passes
  ep_comm,       // MoE dispatch and combine all-to-alls over the expert-parallel group
  pp_p2p,        // pipeline activations and gradients between stages
  pp_bubble,     // pipeline fill and drain
  dp_comm,       // exposed gradient sync, ZeRO gathers, 2.5D depth sync
  optimizer,     // optimizer step on device and host
  offload,       // host<->device copies for offload
  count
};
std::string_view to_string(TimeKind kind);

struct MemoryBreakdown {
  double parameters_bytes = 0;
  double gradients_bytes = 0;
  double optimizer_bytes = 0;
  double activations_bytes = 0;
  double workspace_bytes = 0;
  // Of workspace_bytes: the trainer's own temporaries and scratch (the rest is the
  // runtime's reserve, outside the tensors a rank allocates); on offload plans these
  // draw from the budgeted pool beside the activations.
  double trainer_workspace_bytes = 0;
  double host_bytes = 0;  // per device, held in host memory by offload
  // Of parameters_bytes and gradients_bytes: the whole-layer buffers ZeRO 2 and 3 hold
  // beside the shards (ZeRO-3's gathered weights, one layer's gradient before its
  // reduce-scatter); on offload plans they sit outside the budgeted pool of model states.
  double layer_transient_bytes = 0;
  // What an offload plan's device budget holds besides the chunk plan's model states.
  double non_model_bytes() const { return activations_bytes + trainer_workspace_bytes + layer_transient_bytes; }
  double device_total_bytes() const {
    return parameters_bytes + gradients_bytes + optimizer_bytes + activations_bytes + workspace_bytes;
  }
};

// Per rank, per step, as sent through the communicator (bytes = nccl-tests size x
// bus factor; messages = latency steps of the algorithm).
struct CommVolume {
  double tp_bytes = 0, tp_messages = 0;
  double sp_bytes = 0, sp_messages = 0;
  double ep_bytes = 0, ep_messages = 0;  // MoE all-to-alls
  double pp_bytes = 0, pp_messages = 0;
  double dp_bytes = 0, dp_messages = 0;  // incl. the tied embedding's sum between the pipeline's ends
  double offload_bytes = 0;
};

struct Estimate {
  ParallelConfig parallel;
  Reject reject = Reject::none;  // none, a layout rule, or out of memory
  double step_time_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;
  double model_flops_per_step = 0;  // 6N-style training FLOPs, without recompute
  int micro_batches = 0;
  MemoryBreakdown memory;
  bool fits = false;
  std::array<double, std::size_t(TimeKind::count)> time_s{};
  CommVolume comm;
  unsigned cost_flags = 0;  // profiles::CostFlag bits raised while pricing

  double time(TimeKind kind) const { return time_s[std::size_t(kind)]; }
  Json to_json() const;
};

}  // namespace tessel::planner
