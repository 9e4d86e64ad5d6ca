// Measured op events, named by the op ids of the Program core lowers from the same plan
// ("mb3/L12/fwd/mlp.fc1"), so that measurement and prediction line up op by op. An op
// the executor runs in pieces (the attention core around its softmax, the loss around
// its reductions) records one event per piece under the same id; per-op totals sum
// them. Times are seconds since the timeline's origin, which every rank sets right
// after a barrier, so ranks share a clock to within the barrier's skew.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace tessel::executor {

struct OpEvent {
  int step = 0;
  std::string op;
  double start_s = 0, end_s = 0;
};

class OpTimeline {
 public:
  using Clock = std::chrono::steady_clock;

  void reset_origin() { origin_ = Clock::now(); }
  void set_step(int step) { step_ = step; }
  double now_s() const { return std::chrono::duration<double>(Clock::now() - origin_).count(); }
  void record(std::string op, double start_s, double end_s) {
    events_.push_back({step_, std::move(op), start_s, end_s});
  }
  // Moves the events recorded so far out.
  std::vector<OpEvent> take() { return std::exchange(events_, {}); }

  // Times one scope: `auto timed = timeline.time(id);`.
  class Scope {
   public:
    Scope(OpTimeline& timeline, std::string op) : timeline_(timeline), op_(std::move(op)), start_s_(timeline.now_s()) {}
    ~Scope() { timeline_.record(std::move(op_), start_s_, timeline_.now_s()); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    OpTimeline& timeline_;
    std::string op_;
    double start_s_;
  };
  [[nodiscard]] Scope time(std::string op) { return Scope(*this, std::move(op)); }

 private:
  Clock::time_point origin_ = Clock::now();
  int step_ = 0;
  std::vector<OpEvent> events_;
};

}  // namespace tessel::executor
