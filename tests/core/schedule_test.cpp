// The pipeline schedule generator: every step exactly once, forward before backward,
// no deadlock across stages, the bubble each schedule is known for, and 1F1B's bound on
// micro-batches in flight.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>

#include "tessel/core/schedule.hpp"

using namespace tessel;

namespace {
// Runs every stage's steps in its own order with forward and backward of a whole stage
// taking `forward_s` and `backward_s` (a chunk takes 1/v of that), honouring the data
// flow between virtual stages. Returns the makespan, or -1 if the stages deadlock.
double run_pipeline(Schedule schedule, int stages, int micro_batches, int v, double forward_s = 1,
                    double backward_s = 1) {
  std::vector<std::vector<PipelineStep>> steps(stages);
  for (int s = 0; s < stages; ++s) steps[s] = pipeline_schedule(schedule, s, stages, micro_batches, v);
  std::vector<std::size_t> next(stages, 0);
  std::vector<double> free_at(stages, 0);
  std::map<std::tuple<int, int, Pass>, double> finished;  // (virtual stage, micro-batch, pass)
  const int last = stages * v - 1;
  double makespan = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < stages; ++s) {
      while (next[s] < steps[s].size()) {
        const PipelineStep& step = steps[s][next[s]];
        const int vs = virtual_stage(s, step.chunk, stages);
        std::tuple<int, int, Pass> need{-1, 0, Pass::forward};
        if (step.pass == Pass::forward && vs > 0) need = {vs - 1, step.micro_batch, Pass::forward};
        if (step.pass == Pass::backward) {
          need = vs == last ? std::tuple{vs, step.micro_batch, Pass::forward}
                            : std::tuple{vs + 1, step.micro_batch, Pass::backward};
        }
        double ready = 0;
        if (std::get<0>(need) >= 0) {
          auto it = finished.find(need);
          if (it == finished.end()) break;  // wait for another stage
          ready = it->second;
        }
        const double start = std::max(ready, free_at[s]);
        const double end = start + (step.pass == Pass::forward ? forward_s : backward_s) / v;
        finished[{vs, step.micro_batch, step.pass}] = end;
        free_at[s] = end;
        makespan = std::max(makespan, end);
        ++next[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < stages; ++s) {
    if (next[s] != steps[s].size()) return -1;
  }
  return makespan;
}
}  // namespace

TEST(Schedule, EveryStepOnceForwardBeforeBackward) {
  for (Schedule schedule : {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved}) {
    for (int stages : {1, 2, 4}) {
      for (int m : {1, 2, 4, 8, 12}) {
        const int v = schedule == Schedule::interleaved ? 2 : 1;
        if (schedule == Schedule::interleaved && (stages < 2 || m % stages != 0)) continue;
        for (int s = 0; s < stages; ++s) {
          const auto steps = pipeline_schedule(schedule, s, stages, m, v);
          EXPECT_EQ(steps.size(), std::size_t(2 * m * v));
          std::set<std::tuple<int, int, Pass>> seen;
          for (const PipelineStep& step : steps) {
            EXPECT_TRUE(seen.insert({step.micro_batch, step.chunk, step.pass}).second);
            if (step.pass == Pass::backward) {
              EXPECT_TRUE(seen.count({step.micro_batch, step.chunk, Pass::forward})) << "backward before forward";
            }
          }
        }
      }
    }
  }
}

TEST(Schedule, BubbleIsPMinusOneMicroBatchSlots) {
  for (Schedule schedule : {Schedule::gpipe, Schedule::one_f_one_b}) {
    for (int stages : {1, 2, 4, 8}) {
      for (int m : {1, 3, 8, 16}) {
        const double makespan = run_pipeline(schedule, stages, m, 1, 1.0, 2.0);
        ASSERT_GT(makespan, 0) << "deadlock";
        // (m + p - 1) slots of forward + backward: bubble (p-1)/(m+p-1) of the step.
        EXPECT_DOUBLE_EQ(makespan, (m + stages - 1) * 3.0) << int(schedule) << " p" << stages << " m" << m;
      }
    }
  }
}

TEST(Schedule, InterleavingDividesTheBubbleByTheChunks) {
  for (int stages : {2, 4}) {
    for (int v : {2, 3}) {
      for (int m : {stages, 2 * stages, 4 * stages}) {
        const double makespan = run_pipeline(Schedule::interleaved, stages, m, v);
        ASSERT_GT(makespan, 0) << "deadlock p" << stages << " v" << v << " m" << m;
        EXPECT_NEAR(makespan, 2.0 * (m + double(stages - 1) / v), 1e-9) << "p" << stages << " v" << v << " m" << m;
        EXPECT_LT(makespan, run_pipeline(Schedule::one_f_one_b, stages, m, 1));
      }
    }
  }
}

TEST(Schedule, OneFOneBHoldsAtMostStagesMinusStageMicroBatches) {
  const int stages = 4, m = 16;
  for (int s = 0; s < stages; ++s) {
    int in_flight = 0, most = 0;
    for (const PipelineStep& step : pipeline_schedule(Schedule::one_f_one_b, s, stages, m)) {
      in_flight += step.pass == Pass::forward ? 1 : -1;
      most = std::max(most, in_flight);
    }
    EXPECT_EQ(most, stages - s);
    int gpipe_in_flight = 0, gpipe_most = 0;
    for (const PipelineStep& step : pipeline_schedule(Schedule::gpipe, s, stages, m)) {
      gpipe_in_flight += step.pass == Pass::forward ? 1 : -1;
      gpipe_most = std::max(gpipe_most, gpipe_in_flight);
    }
    EXPECT_EQ(gpipe_most, m);
  }
}
