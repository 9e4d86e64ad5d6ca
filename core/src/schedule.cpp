#include "tessel/core/schedule.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "tessel/core/error.hpp"

namespace tessel {

PipelineStep pipeline_step(Schedule schedule, int stage, int stages, int micro_batches, int virtual_stages, int k) {
  const int m = micro_batches;
  auto forward = [](int mb, int chunk = 0) { return PipelineStep{mb, chunk, Pass::forward}; };
  auto backward = [](int mb, int chunk = 0) { return PipelineStep{mb, chunk, Pass::backward}; };
  if (stages == 1 && schedule != Schedule::gpipe) return k % 2 == 0 ? forward(k / 2) : backward(k / 2);
  switch (schedule) {
    case Schedule::gpipe: return k < m ? forward(k) : backward(k - m);
    case Schedule::one_f_one_b: {
      const int warmup = std::min(stages - stage - 1, m);
      if (k < warmup) return forward(k);
      const int j = k - warmup, pairs = m - warmup;
      if (j < 2 * pairs) return j % 2 == 0 ? forward(warmup + j / 2) : backward(j / 2);
      return backward(pairs + (j - 2 * pairs));
    }
    case Schedule::interleaved: {
      const int v = virtual_stages;
      TESSEL_ASSERT(v >= 1 && m % stages == 0, "interleaved needs micro-batches divisible by stages");
      const int total = m * v;
      // The k-th forward (backward) step of a stage: groups of `stages` micro-batches
      // go through every chunk before the next group starts.
      auto micro_batch_of = [&](int i) { return (i / (stages * v)) * stages + i % stages; };
      auto forward_step = [&](int i) { return forward(micro_batch_of(i), (i / stages) % v); };
      auto backward_step = [&](int i) { return backward(micro_batch_of(i), v - 1 - (i / stages) % v); };
      const int warmup = m == stages ? total : std::min((stages - stage - 1) * 2 + (v - 1) * stages, total);
      if (k < warmup) return forward_step(k);
      const int j = k - warmup, pairs = total - warmup;
      if (j < 2 * pairs) return j % 2 == 0 ? forward_step(warmup + j / 2) : backward_step(j / 2);
      return backward_step(pairs + (j - 2 * pairs));
    }
  }
  return forward(0);
}

std::vector<PipelineStep> pipeline_schedule(Schedule schedule, int stage, int stages, int micro_batches,
                                            int virtual_stages) {
  TESSEL_ASSERT(stages >= 1 && stage >= 0 && stage < stages && micro_batches >= 1, "bad pipeline shape");
  const int chunks = schedule == Schedule::interleaved ? virtual_stages : 1;
  std::vector<PipelineStep> steps;
  steps.reserve(std::size_t(2 * micro_batches * chunks));
  for (int k = 0; k < 2 * micro_batches * chunks; ++k) {
    steps.push_back(pipeline_step(schedule, stage, stages, micro_batches, virtual_stages, k));
  }
  return steps;
}

namespace {

// One pass of a pipeline's critical path, in an order where every pass comes after its
// input: where its end is kept, where its input's is (-1: none), its stage and virtual
// stage, and whether it is its virtual stage's last backward.
struct OrderedPass {
  int end_at = 0, input_at = -1, stage = 0, virtual_stage = 0;
  bool forward = true, last_backward = false;
};

// The passes of every stage in schedule order, interleaved as their inputs allow: the
// order depends on the shape alone, so it is worked out once per shape and thread.
std::vector<OrderedPass> pass_order(Schedule schedule, int stages, int micro_batches, int v) {
  const int virtual_count = stages * v, steps = 2 * micro_batches * v;
  const int passes = micro_batches * virtual_count;
  std::vector<char> forward_done(std::size_t(passes), 0), backward_done(std::size_t(passes), 0);
  std::vector<int> next(std::size_t(stages), 0), backwards_done(std::size_t(virtual_count), 0);
  std::vector<OrderedPass> order;
  order.reserve(std::size_t(stages * steps));
  int remaining = stages * steps;
  while (remaining > 0) {
    const int before = remaining;
    // Each stage runs its steps in order for as long as their inputs are there.
    for (int s = 0; s < stages; ++s) {
      while (next[std::size_t(s)] < steps) {
        const PipelineStep step = pipeline_step(schedule, s, stages, micro_batches, v, next[std::size_t(s)]);
        const int vs = virtual_stage(s, step.chunk, stages);
        const int at = step.micro_batch * virtual_count + vs;
        const bool forward = step.pass == Pass::forward;
        int input_at = -1;
        if (forward && vs > 0) {
          if (!forward_done[std::size_t(at - 1)]) break;
          input_at = at - 1;
        } else if (!forward && vs < virtual_count - 1) {
          if (!backward_done[std::size_t(at + 1)]) break;
          input_at = passes + at + 1;
        } else if (!forward) {
          if (!forward_done[std::size_t(at)]) break;
          input_at = at;
        }
        OrderedPass pass;
        pass.end_at = forward ? at : passes + at;
        pass.input_at = input_at;
        pass.stage = s;
        pass.virtual_stage = vs;
        pass.forward = forward;
        pass.last_backward = !forward && ++backwards_done[std::size_t(vs)] == micro_batches;
        order.push_back(pass);
        (forward ? forward_done : backward_done)[std::size_t(at)] = 1;
        ++next[std::size_t(s)];
        --remaining;
      }
    }
    TESSEL_ASSERT(remaining < before, "the pipeline schedule deadlocks");
  }
  return order;
}

const std::vector<OrderedPass>& cached_pass_order(Schedule schedule, int stages, int micro_batches, int v) {
  struct Entry {
    Schedule schedule;
    int stages, micro_batches, v;
    std::vector<OrderedPass> order;
  };
  thread_local std::vector<Entry> known;
  for (const Entry& entry : known) {
    if (entry.schedule == schedule && entry.stages == stages && entry.micro_batches == micro_batches && entry.v == v) {
      return entry.order;
    }
  }
  if (known.size() >= 32) known.erase(known.begin());
  known.push_back({schedule, stages, micro_batches, v, pass_order(schedule, stages, micro_batches, v)});
  return known.back().order;
}

}  // namespace

double pipeline_span_s(Schedule schedule, int stages, int micro_batches, int virtual_stages,
                       const std::vector<double>& forward_s, const std::vector<double>& backward_s,
                       const std::vector<double>& last_backward_extra_s, const std::vector<double>& deferred_s,
                       std::vector<double>* stage_ends_s) {
  const int v = schedule == Schedule::interleaved ? virtual_stages : 1;
  const int virtual_count = stages * v;
  TESSEL_ASSERT(int(forward_s.size()) == virtual_count && int(backward_s.size()) == virtual_count,
                "one forward and one backward time per virtual stage");
  const std::vector<OrderedPass>& order = cached_pass_order(schedule, stages, micro_batches, v);
  // When each pass ends: forwards, then backwards, by (micro-batch, virtual stage).
  thread_local std::vector<double> end_s, clock, pending;
  end_s.resize(std::size_t(2 * micro_batches * virtual_count));
  clock.assign(std::size_t(stages), 0.0);
  pending.assign(std::size_t(stages), 0.0);
  const bool extra = !last_backward_extra_s.empty(), deferring = !deferred_s.empty();
  for (const OrderedPass& pass : order) {
    const double input_s = pass.input_at < 0 ? 0.0 : end_s[std::size_t(pass.input_at)];
    const std::size_t s = std::size_t(pass.stage), vs = std::size_t(pass.virtual_stage);
    double& stage_clock = clock[s];
    stage_clock = std::max(stage_clock, input_s) + std::exchange(pending[s], 0.0) +
                  (pass.forward ? forward_s : backward_s)[vs];
    if (pass.last_backward && extra) stage_clock += last_backward_extra_s[vs];
    if (!pass.forward && deferring) pending[s] = deferred_s[vs];
    end_s[std::size_t(pass.end_at)] = stage_clock;
  }
  for (int s = 0; s < stages; ++s) clock[std::size_t(s)] += pending[std::size_t(s)];
  if (stage_ends_s != nullptr) *stage_ends_s = clock;
  return *std::max_element(clock.begin(), clock.end());
}

}  // namespace tessel
