#include "tessel/core/parallel_config.hpp"

#include <cmath>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel {

int exact_square_root(int value) {
  int root = int(std::lround(std::sqrt(double(value))));
  return root * root == value ? root : 0;
}

int exact_cube_root(int value) {
  int root = int(std::lround(std::cbrt(double(value))));
  return root * root * root == value ? root : 0;
}

int ParallelConfig::tp_grid_side() const {
  switch (tp_mode) {
    case TpMode::d1: return tp;
    case TpMode::d2: return exact_square_root(tp);
    case TpMode::d2_5: return tp_depth > 0 && tp % tp_depth == 0 ? exact_square_root(tp / tp_depth) : 0;
    case TpMode::d3: return exact_cube_root(tp);
  }
  return 0;
}

ParallelConfig ParallelConfig::from_json(const Json& json, const std::string& path) {
  JsonFields f(json, path);
  ParallelConfig p;
  p.dp = int(f.positive_int_or("dp", 1, limits::kMaxGpus));
  p.pp = int(f.positive_int_or("pp", 1, limits::kMaxGpus));
  p.tp = int(f.positive_int_or("tp", 1, limits::kMaxGpus));
  p.tp_mode = *enum_from_string<TpMode>(f.choice_or("tp_mode", {"1d", "2d", "2.5d", "3d"}, "1d"));
  p.tp_depth = int(f.positive_int_or("tp_depth", 1, limits::kMaxGpus));
  p.tp_sequence_parallel = f.boolean_or("tp_sequence_parallel", false);
  p.tp_comm_overlap = f.boolean_or("tp_comm_overlap", false);
  p.sp = int(f.positive_int_or("sp", 1, limits::kMaxGpus));
  p.ep = int(f.positive_int_or("ep", 1, limits::kMaxGpus));
  // Each axis fits; their product (the world size, an int) must too.
  if (const std::int64_t world = std::int64_t(p.dp) * p.pp * p.tp * p.sp; world > limits::kMaxGpus) {
    f.fail("dp", fmt::format("dp*pp*tp*sp = {} is more than the {} GPUs tessel models", world, limits::kMaxGpus));
  }
  p.zero = int(f.int_in_range("zero", 0, 3, 0));
  p.zero_quantized_weights = f.boolean_or("zero_quantized_weights", false);
  if (p.zero_quantized_weights && p.zero != 3) {
    f.fail("zero_quantized_weights", fmt::format("quantizes ZeRO-3's weight gathers, so it needs zero 3, got zero {}", p.zero));
  }
  if (const Json* offload = f.get("offload")) {
    if (offload->is_string()) {
      auto mode = enum_from_string<OffloadMode>(offload->get<std::string>());
      if (!mode) f.fail("offload", fmt::format("must be one of {} (or an object with mode and device_fraction), got {}",
                                               enum_choices<OffloadMode>(), offload->dump()));
      p.offload = *mode;
    } else {
      JsonFields o(*offload, f.field_path("offload"));
      p.offload = *enum_from_string<OffloadMode>(o.choice("mode", {"none", "optimizer", "chunked"}));
      p.offload_device_fraction = o.fraction_or("device_fraction", p.offload == OffloadMode::chunked ? 0.5 : 1.0);
      o.finish();
    }
    if (p.offload == OffloadMode::chunked && p.offload_device_fraction == 1.0 && offload->is_string()) {
      p.offload_device_fraction = 0.5;
    }
    if (p.offload != OffloadMode::chunked && p.offload_device_fraction != 1.0) {
      f.fail("offload", "device_fraction applies to mode chunked only");
    }
  }
  p.recompute = *enum_from_string<Recompute>(f.choice_or("recompute", {"none", "selective", "full", "selective-op"}, "none"));
  p.micro_batch = int(f.positive_int_or("micro_batch", 1, limits::kMaxGlobalBatch));
  p.schedule = *enum_from_string<Schedule>(f.choice_or("schedule", {"gpipe", "1f1b", "interleaved"}, "1f1b"));
  p.virtual_stages = int(f.positive_int_or("virtual_stages", 1, limits::kMaxLayers));
  f.finish();
  return p;
}

Json ParallelConfig::to_json() const {
  Json offload_json{{"mode", to_string(offload)}};
  if (offload == OffloadMode::chunked) offload_json["device_fraction"] = offload_device_fraction;
  Json json{{"dp", dp},
              {"pp", pp},
              {"tp", tp},
              {"tp_mode", to_string(tp_mode)},
              {"tp_depth", tp_depth},
              {"tp_sequence_parallel", tp_sequence_parallel},
              {"sp", sp},
              {"zero", zero},
              {"offload", offload_json},
              {"recompute", to_string(recompute)},
              {"micro_batch", micro_batch},
              {"schedule", to_string(schedule)},
              {"virtual_stages", virtual_stages}};
  // Only an MoE plan names ep, only an overlapped one tp_comm_overlap: other plans keep
  // the JSON they always had.
  if (ep != 1) json["ep"] = ep;
  if (tp_comm_overlap) json["tp_comm_overlap"] = true;
  if (zero_quantized_weights) json["zero_quantized_weights"] = true;
  return json;
}

std::string ParallelConfig::summary() const {
  std::string tp_text = fmt::format("tp{}", tp);
  if (tp > 1) {
    tp_text += fmt::format("({}", to_string(tp_mode));
    if (tp_mode == TpMode::d2_5) tp_text += fmt::format(" d{}", tp_depth);
    if (tp_sequence_parallel) tp_text += "+sp";
    if (tp_comm_overlap) tp_text += "+ov";
    tp_text += ")";
  }
  std::string offload_text(to_string(offload));
  if (offload == OffloadMode::chunked) offload_text += fmt::format("{:.2f}", offload_device_fraction);
  std::string schedule_text(to_string(schedule));
  if (schedule == Schedule::interleaved) schedule_text += fmt::format("x{}", virtual_stages);
  // ep only where it is not 1: dense plans keep the summary they always had.
  const std::string sp_text = ep != 1 ? fmt::format("sp{} ep{}", sp, ep) : fmt::format("sp{}", sp);
  return fmt::format("dp{} pp{} {} {} z{}{} off:{} rc:{} mb{} {}", dp, pp, tp_text, sp_text, zero,
                     zero_quantized_weights ? "q" : "", offload_text,
                     to_string(recompute), micro_batch, schedule_text);
}

}  // namespace tessel
