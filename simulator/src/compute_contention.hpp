// Hidden data-parallel traffic in the simulator, priced as the planner prices it: the
// collective_contention seconds a collective owes the compute beside it, and overlap_efficiency
// slowing a collective while compute runs. Both read the overlap off the rank's compute-busy
// clock; with the defaults (0 and 1) nothing changes. A ledger per rank, in its own header so
// simulation.cpp keeps to the replay; docs/SIMULATOR.md says who pays which debt and why.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Engine.hpp>

#include "tessel/core/program.hpp"
#include "tessel/profiles/calibration.hpp"

namespace tessel::simulator {

class ComputeContention {
 public:
  explicit ComputeContention(const profiles::Calibration& calibration)
      : ComputeContention(calibration.collective_contention, calibration.overlap_efficiency) {}
  explicit ComputeContention(double contention = 0, double overlap_efficiency = 1)
      : contention_(contention), efficiency_(std::clamp(overlap_efficiency, 0.0, 1.0)) {}

  bool active() const { return contention_ > 0 || efficiency_ < 1.0; }
  // The compute seconds run up to `now_s` (a running op counts its part so far).
  double busy_at(double now_s) const { return busy_s_ + (started_s_ >= 0 ? now_s - started_s_ : 0.0); }
  void compute_started(double now_s) { started_s_ = now_s; }
  void compute_ended(double now_s) {
    if (started_s_ >= 0) busy_s_ += now_s - started_s_;
    started_s_ = -1;
  }
  // A data-parallel collective ended at `now_s`; `busy_at_start` was busy_at() when it
  // began. Owes the compute its contention and returns the work, in seconds at the full
  // rate, that overlap did not move.
  double collective_ended(double busy_at_start, double now_s, bool in_micro_batch) {
    const double overlapped_s = std::max(0.0, busy_at(now_s) - busy_at_start);
    (in_micro_batch ? next_op_debt_s_ : step_debt_s_) += contention_ * overlapped_s;
    return overlapped_s * (1.0 - efficiency_);
  }
  // Works off `remaining_s` of full-rate work on the calling comm actor: each round
  // sleeps the work left, and what compute ran beside it was done at the slow rate only.
  // Rounds shrink by (1 - efficiency) x the busy fraction; a step's compute ends, so they
  // end; the cap only bounds a pathological case, whose rest is slept at the full rate.
  void work_off(double remaining_s) {
    constexpr int kMaxRounds = 64;
    for (int round = 0; round < kMaxRounds && remaining_s > 1e-12; ++round) {
      const double busy_before_s = busy_at(simgrid::s4u::Engine::get_clock());
      simgrid::s4u::this_actor::sleep_for(remaining_s);
      remaining_s = (busy_at(simgrid::s4u::Engine::get_clock()) - busy_before_s) * (1.0 - efficiency_);
    }
    if (remaining_s > 1e-12) simgrid::s4u::this_actor::sleep_for(remaining_s);
  }
  // Around each op of the rank's streams (each stream its own actor, so the op keeps its
  // mark): a compute op runs the busy clock; a data-parallel collective off the compute
  // stream is measured against it, and op_ended waits what it did not move.
  struct OpMark {
    bool computes = false, measured = false, in_micro_batch = false;
    double busy_at_start = 0;
  };
  OpMark op_started(const ProgramOp& op, bool computes, double now_s) {
    const bool measured = active() && op.stream != Stream::compute && op.work.kind == OpKind::collective &&
                          (op.work.group == CommGroup::dp || op.work.group == CommGroup::expert_dp);
    if (computes) compute_started(now_s);
    return {computes, measured, op.id.starts_with("mb"), busy_at(now_s)};
  }
  void op_ended(const OpMark& mark) {
    const double now_s = simgrid::s4u::Engine::get_clock();
    if (mark.computes) compute_ended(now_s);
    const double left_s = mark.measured ? collective_ended(mark.busy_at_start, now_s, mark.in_micro_batch) : 0.0;
    if (left_s > 0) work_off(left_s);
  }
  // The contention seconds compute op `op_index` pays: what the micro-batch owes, and
  // the step's debt if it is the op `set_step_payer` named (its program index).
  void set_step_payer(std::uint32_t op_index) { step_payer_ = op_index; }
  double debt_paid_by_s(std::uint32_t op_index) {
    return std::exchange(next_op_debt_s_, 0.0) + (op_index == step_payer_ ? std::exchange(step_debt_s_, 0.0) : 0.0);
  }

 private:
  double contention_, efficiency_;
  double busy_s_ = 0, started_s_ = -1, next_op_debt_s_ = 0, step_debt_s_ = 0;
  std::uint32_t step_payer_ = ~0u;
};

}  // namespace tessel::simulator
