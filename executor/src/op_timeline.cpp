#include "tessel/executor/op_timeline.hpp"

namespace tessel::executor {

OpTimeline::Scope::Scope(OpTimeline& timeline, std::string op, Stream stream)
    : timeline_(timeline), op_(std::move(op)), stream_(stream) {
  if (stream != Stream::compute) timeline.backend_.wait_for(stream, Stream::compute);
  start_ = timeline.backend_.mark(stream);
}

void OpTimeline::resolve() {
  if (pending_.empty()) return;
  resolved_.reserve(resolved_.size() + pending_.size());
  for (Pending& p : pending_) {
    resolved_.push_back({p.step, std::move(p.op), backend_.elapsed_s(p.start), backend_.elapsed_s(p.end)});
  }
  pending_.clear();
  backend_.release_marks();
}

}  // namespace tessel::executor
