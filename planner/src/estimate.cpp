#include "tessel/planner/estimate.hpp"

#include "tessel/profiles/cost_lookup.hpp"

namespace tessel::planner {

Json Estimate::to_json() const {
  Json breakdown = Json::object();
  for (std::size_t kind = 0; kind < time_s.size(); ++kind) breakdown[std::string(to_string(TimeKind(kind)))] = time_s[kind];
  Json out{{"parallel", parallel.to_json()},
           {"step_time_s", step_time_s},
           {"tokens_per_s", tokens_per_s},
           {"mfu", mfu},
           {"model_flops_per_step", model_flops_per_step},
           {"micro_batches", micro_batches},
           {"fits", fits},
           {"memory_per_gpu_bytes", memory.device_total_bytes()},
           {"memory_parts_bytes",
            {{"parameters", memory.parameters_bytes},
             {"gradients", memory.gradients_bytes},
             {"optimizer", memory.optimizer_bytes},
             {"activations", memory.activations_bytes},
             {"workspace", memory.workspace_bytes},
             {"host_offload", memory.host_bytes}}},
           {"time_breakdown_s", breakdown},
           {"comm_per_rank_per_step",
            {{"tp_bytes", comm.tp_bytes},
             {"tp_messages", comm.tp_messages},
             {"sp_bytes", comm.sp_bytes},
             {"sp_messages", comm.sp_messages},
             {"ep_bytes", comm.ep_bytes},
             {"ep_messages", comm.ep_messages},
             {"pp_bytes", comm.pp_bytes},
             {"pp_messages", comm.pp_messages},
             {"dp_bytes", comm.dp_bytes},
             {"dp_messages", comm.dp_messages},
             {"offload_bytes", comm.offload_bytes}}}};
  out["reject"] = reject == Reject::none ? Json(nullptr) : Json(reject_reason(reject));
  out["cost_flags"] = profiles::describe_cost_flags(cost_flags);
  return out;
}

}  // namespace tessel::planner
