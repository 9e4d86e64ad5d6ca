#include "tessel/core/train_spec.hpp"

namespace tessel {

TrainSpec TrainSpec::from_json(const Json& json, const std::string& path) {
  JsonFields f(json, path);
  TrainSpec t;
  t.global_batch = int(f.positive_int("global_batch", limits::kMaxGlobalBatch));
  t.seq_len = int(f.positive_int_or("seq_len", 0, limits::kMaxSeqLen));
  t.precision = *enum_from_string<Precision>(f.choice_or("precision", {"fp32", "bf16", "fp16"}, "bf16"));
  t.optimizer = *enum_from_string<Optimizer>(f.choice_or("optimizer", {"adamw", "lamb", "lars"}, "adamw"));
  t.kernels = *enum_from_string<Kernels>(f.choice_or("kernels", {"unfused", "fused"}, "unfused"));
  f.finish();
  return t;
}

Json TrainSpec::to_json() const {
  Json out{{"global_batch", global_batch},
           {"precision", to_string(precision)},
           {"optimizer", to_string(optimizer)}};
  if (seq_len > 0) out["seq_len"] = seq_len;
  if (kernels != Kernels::unfused) out["kernels"] = to_string(kernels);
  return out;
}

}  // namespace tessel
