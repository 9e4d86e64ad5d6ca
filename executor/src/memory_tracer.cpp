// The memory tracer (memory_tracer.hpp): a table of op -> non-model bytes in the order
// of the warm-up step, and the room model states have between two ops.
#include "tessel/executor/memory_tracer.hpp"

#include <algorithm>

namespace tessel::executor {

void MemoryTracer::record(std::string_view op, std::size_t non_model_bytes) {
  if (!tracing_) return;
  peak_ = std::max(peak_, non_model_bytes);
  const auto [it, added] = index_.emplace(std::string(op), samples_.size());
  if (added) {
    samples_.push_back({std::string(op), non_model_bytes});
  } else {
    std::size_t& bytes = samples_[it->second].non_model_bytes;
    bytes = std::max(bytes, non_model_bytes);
  }
}

std::size_t MemoryTracer::non_model_at(std::string_view op) const {
  const auto it = index_.find(std::string(op));
  return it == index_.end() ? peak_ : samples_[it->second].non_model_bytes;
}

std::size_t MemoryTracer::room_at(std::string_view op, std::size_t budget_bytes) const {
  const std::size_t used = non_model_at(op);
  return used >= budget_bytes ? 0 : budget_bytes - used;
}

std::size_t MemoryTracer::least_room_between(std::string_view from, std::string_view to,
                                             std::size_t budget_bytes) const {
  const auto first = index_.find(std::string(from)), last = index_.find(std::string(to));
  if (first == index_.end() || last == index_.end() || last->second < first->second) {
    return peak_ >= budget_bytes ? 0 : budget_bytes - peak_;  // not traced in this order: the safe side
  }
  std::size_t most = 0;
  for (std::size_t i = first->second; i < last->second; ++i) most = std::max(most, samples_[i].non_model_bytes);
  return most >= budget_bytes ? 0 : budget_bytes - most;
}

}  // namespace tessel::executor
