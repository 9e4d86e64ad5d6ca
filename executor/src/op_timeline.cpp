#include "tessel/executor/op_timeline.hpp"

namespace tessel::executor {

OpTimeline::Scope::Scope(OpTimeline& timeline, std::string op, Stream stream)
    : timeline_(timeline), op_(std::move(op)), stream_(stream) {
  if (timeline.observer_) timeline.observer_(op_);
  if (stream != Stream::compute) timeline.backend_.wait_for(stream, Stream::compute);
  start_ = timeline.backend_.mark(stream);
}

void OpTimeline::resolve() {
  if (pending_.empty()) return;
  resolved_.reserve(resolved_.size() + pending_.size());
  for (Pending& p : pending_) {
    const double start_s = backend_.elapsed_s(p.start), end_s = backend_.elapsed_s(p.end);
    const double length_s = end_s - start_s;
    // Whole events keep their marks' times exactly; shares are cut from them.
    resolved_.push_back({p.step, std::move(p.op), p.from == 0.0 ? start_s : start_s + p.from * length_s,
                         p.to == 1.0 ? end_s : start_s + p.to * length_s});
  }
  pending_.clear();
  backend_.release_marks();
}

}  // namespace tessel::executor
