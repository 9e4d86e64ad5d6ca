// Measured op events, named by the Program's op ids (core's op_names.hpp) so measurement and
// prediction line up op by op. An op run in pieces records one event per piece under its id; a
// kernel doing several ops' work (fused residual + norm) records a share under each. Times are
// the backend's marks on the op's own stream, resolved once per step; every rank sets its origin
// right after a barrier, so ranks share a clock to within the barrier's skew.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessel/kernels/backend.hpp"

namespace tessel::executor {

struct OpEvent {
  int step = 0;
  std::string op;
  double start_s = 0, end_s = 0;
};

class OpTimeline {
 public:
  explicit OpTimeline(kernels::Backend& backend) : backend_(backend) {}

  void reset_origin() { backend_.reset_origin(); }
  void set_step(int step) { step_ = step; }
  // Called with each op's id as it starts (a timed scope opens) or, for ops recorded from
  // marks, as it is recorded: the offload manager's per-op memory checks hang here.
  void set_op_observer(std::function<void(std::string_view)> observer) { observer_ = std::move(observer); }
  // A mark on `stream` now (for spans that start and end in different places).
  kernels::TimeMark mark(Stream stream) { return backend_.mark(stream); }
  void record(std::string op, kernels::TimeMark start, kernels::TimeMark end) {
    if (observer_) observer_(op);
    pending_.push_back({step_, std::move(op), start, end, 0.0, 1.0});
  }
  // A share of one kernel that does the work of several Program ops (a fused kernel): the
  // event spans [from, to] of the kernel's [start, end] as fractions of its length.
  void record_share(std::string op, kernels::TimeMark start, kernels::TimeMark end, double from, double to) {
    if (observer_) observer_(op);
    pending_.push_back({step_, std::move(op), start, end, from, to});
  }
  // Turns the marks recorded so far into seconds since the origin (waits for the streams
  // to pass them) and releases them: the trainer does this once per step.
  void resolve();
  // Moves the events recorded so far out.
  std::vector<OpEvent> take() {
    resolve();
    return std::exchange(resolved_, {});
  }

  // Times one scope on `stream`: `auto timed = timeline.time(id, stream);`. A scope on
  // another stream than compute first makes that stream wait for the compute stream, so
  // the op's time starts when its inputs are ready, not when the stream was idle.
  class Scope {
   public:
    Scope(OpTimeline& timeline, std::string op, Stream stream);
    // The observer saw the op when the scope opened (and must not throw from here).
    ~Scope() { timeline_.pending_.push_back({timeline_.step_, std::move(op_), start_, timeline_.backend_.mark(stream_), 0.0, 1.0}); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    OpTimeline& timeline_;
    std::string op_;
    Stream stream_;
    kernels::TimeMark start_;
  };
  [[nodiscard]] Scope time(std::string op, Stream stream = Stream::compute) {
    return Scope(*this, std::move(op), stream);
  }

 private:
  struct Pending {
    int step;
    std::string op;
    kernels::TimeMark start, end;
    double from, to;  // the share of [start, end] the event spans
  };
  kernels::Backend& backend_;
  std::function<void(std::string_view)> observer_;
  int step_ = 0;
  std::vector<Pending> pending_;
  std::vector<OpEvent> resolved_;
};

}  // namespace tessel::executor
