// The memory tracer: during the warm-up step it records, op by op, the non-model memory held on
// the device (activations, workspace, gathered weights: Buffers outside the device pool), so the
// offload manager knows the room model states have at each op. The warm-up is an ordinary step;
// the manager fetches on demand in steps 1 and 2 (whose pool peak is the steady state) and
// prefetches from step 3 on.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tessel::executor {

class MemoryTracer {
 public:
  // While tracing: the bytes live when `op` starts (an op seen in pieces keeps the most).
  void record(std::string_view op, std::size_t non_model_bytes);
  // Ends the warm-up; later records are ignored.
  void finish() { tracing_ = false; }
  bool tracing() const { return tracing_; }

  // Ops in the order the warm-up first saw them, with their non-model bytes.
  struct Sample {
    std::string op;
    std::size_t non_model_bytes = 0;
  };
  const std::vector<Sample>& samples() const { return samples_; }
  std::size_t peak_non_model_bytes() const { return peak_; }
  // The traced bytes at `op`; an op the warm-up did not see gets the peak (the safe side).
  std::size_t non_model_at(std::string_view op) const;
  // Room for model states at `op` under `budget_bytes`: budget - non-model, 0 at least.
  std::size_t room_at(std::string_view op, std::size_t budget_bytes) const;
  // The least room over the traced ops from `from` (inclusive) to `to` (exclusive), in
  // warm-up order: what a chunk fetched at `from` and used at `to` must fit in.
  std::size_t least_room_between(std::string_view from, std::string_view to, std::size_t budget_bytes) const;

 private:
  bool tracing_ = true;
  std::vector<Sample> samples_;
  std::unordered_map<std::string, std::size_t> index_;
  std::size_t peak_ = 0;
};

}  // namespace tessel::executor
