#include "tessel/planner/search.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>

#include <tbb/blocked_range.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/global_control.h>
#include <tbb/info.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

namespace tessel::planner {

namespace {

std::vector<int> divisors(int value) {
  std::vector<int> out;
  for (int d = 1; d <= value; ++d) {
    if (value % d == 0) out.push_back(d);
  }
  return out;
}

// One unit of parallel work: a factorisation with one tensor-grid shape.
struct OuterItem {
  int dp, pp, tp, sp;
  TpMode mode;
  int depth;
  bool sequence_parallel;
  int ep = 1;
  bool tp_comm_overlap = false;
};

// `experts` > 0 (an MoE model): every expert-parallel degree that divides dp and the
// expert count, each its own item; MoE blocks are modelled with 1D tensor parallelism,
// so the grid modes are left to check_layout to count as rejected.
// `tp_overlap_ranks`: the largest tensor-parallel group whose collectives the search may
// overlap with its GEMMs (one node's GPUs; 1 on CPU ranks, whose MPI collectives have no
// userbuffers and whose executor refuses the option).
std::vector<OuterItem> outer_items(int world, int experts, int tp_overlap_ranks) {
  std::vector<OuterItem> items;
  for (auto [dp, pp, tp, sp] : factorisations(world)) {
    auto add = [&](TpMode mode, int depth) {
      for (int ep : experts > 0 ? divisors(std::gcd(dp, experts)) : std::vector<int>{1}) {
        items.push_back({dp, pp, tp, sp, mode, depth, false, ep});
        if (mode == TpMode::d1 && tp > 1) {
          // Sequence parallel, and with it Megatron's overlap of its collectives: a choice,
          // since the overlapped GEMMs run slower (profiles/tp_overlap.hpp) and small
          // transfers do not repay that. Offered for tensor groups inside one node only:
          // every overlapped run the corpus measured is, and the search does not
          // recommend what nobody measured (a plan file may still state it).
          items.push_back({dp, pp, tp, sp, mode, depth, true, ep});
          if (tp <= tp_overlap_ranks) items.push_back({dp, pp, tp, sp, mode, depth, true, ep, true});
        }
      }
    };
    add(TpMode::d1, 1);
    if (tp == 1) continue;
    if (exact_square_root(tp) >= 2) add(TpMode::d2, 1);
    for (int depth = 2; depth <= tp; ++depth) {
      if (tp % depth == 0 && exact_square_root(tp / depth) >= 2) add(TpMode::d2_5, depth);
    }
    if (exact_cube_root(tp) >= 2) add(TpMode::d3, 1);
  }
  return items;
}

struct Candidates {
  std::vector<std::pair<OffloadMode, double>> offloads;
};

struct WorkerState {
  std::vector<Estimate> heap;  // max-heap in ranking order: the worst kept plan on top
  std::int64_t searched = 0, priced = 0, valid = 0;
  std::array<std::int64_t, std::size_t(Reject::count)> rejected{};
};

// The ranking, a total order so that which of several tied plans are kept never depends
// on how the grid was split over threads: faster first, then less memory, then by layout.
// The grid is priced with the pipeline's closed-form span; this many of its best plans are
// priced again on the schedule's critical path (CostModel::finish) before the top are chosen.
int kept_candidates(int top_k) { return top_k > 0 ? 2 * top_k + 8 : 0; }

bool ranks_before(const Estimate& a, const Estimate& b) {
  if (a.step_time_s != b.step_time_s) return a.step_time_s < b.step_time_s;
  if (a.memory.device_total_bytes() != b.memory.device_total_bytes()) {
    return a.memory.device_total_bytes() < b.memory.device_total_bytes();
  }
  return a.parallel.summary() < b.parallel.summary();
}

void keep_best(WorkerState& state, const Estimate& estimate, int top_k) {
  if (top_k <= 0) return;
  if (int(state.heap.size()) < top_k) {
    state.heap.push_back(estimate);
    std::push_heap(state.heap.begin(), state.heap.end(), ranks_before);
  } else if (estimate.step_time_s <= state.heap.front().step_time_s && ranks_before(estimate, state.heap.front())) {
    std::pop_heap(state.heap.begin(), state.heap.end(), ranks_before);
    state.heap.back() = estimate;
    std::push_heap(state.heap.begin(), state.heap.end(), ranks_before);
  }
}

}  // namespace

std::vector<std::array<int, 4>> factorisations(int world) {
  std::vector<std::array<int, 4>> out;
  for (int dp : divisors(world)) {
    for (int pp : divisors(world / dp)) {
      for (int tp : divisors(world / dp / pp)) {
        out.push_back({dp, pp, tp, world / dp / pp / tp});
      }
    }
  }
  return out;
}

std::int64_t SearchResult::rejected_total() const {
  std::int64_t total = 0;
  for (auto count : rejected) total += count;
  return total;
}

Json SearchResult::to_json() const {
  Json plans = Json::array();
  for (const auto& estimate : best) plans.push_back(estimate.to_json());
  Json reasons = Json::object();
  for (std::size_t i = 0; i < rejected.size(); ++i) {
    if (rejected[i] > 0) reasons[reject_reason(Reject(i))] = rejected[i];
  }
  return Json{{"plans", plans},     {"searched", searched}, {"priced", priced}, {"valid", valid},
              {"rejected", reasons}, {"cancelled", cancelled}, {"wall_s", wall_s}, {"threads", threads},
              {"cost_flags", profiles::describe_cost_flags(cost_flags)}};
}

namespace {

// The grid's inner loops for one (dp, pp, tp, mode, sp) item: every micro-batch size and
// recompute mode priced once by layout_cost, then every ZeRO stage, offload and schedule
// finished from it.
class ItemSearch {
 public:
  ItemSearch(const CostModel& model, const SearchOptions& options, const std::vector<int>& batch_divisors,
             const std::vector<std::pair<OffloadMode, double>>& offloads, std::function<bool()> should_stop)
      : model_(model),
        options_(options),
        batch_divisors_(batch_divisors),
        offloads_(offloads),
        should_stop_(std::move(should_stop)) {}

  void visit(const OuterItem& item, WorkerState& state) const {
    ParallelConfig p;
    p.dp = item.dp;
    p.pp = item.pp;
    p.tp = item.tp;
    p.sp = item.sp;
    p.tp_mode = item.mode;
    p.tp_depth = item.depth;
    p.tp_sequence_parallel = item.sequence_parallel;
    p.tp_comm_overlap = item.tp_comm_overlap;
    p.ep = item.ep;
    const int global_batch = model_.train().global_batch;
    const std::int64_t inner = std::int64_t(zero_max(item) + 1) * std::int64_t(offloads_.size()) * schedules(item);
    for (int micro_batch : batch_divisors_) {
      if (std::int64_t(micro_batch) * item.dp > global_batch) break;
      if (should_stop_()) return;
      p.micro_batch = micro_batch;
      for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full}) {
        p.recompute = recompute;
        p.schedule = Schedule::one_f_one_b;
        p.virtual_stages = 1;
        p.zero = 0;
        p.offload = OffloadMode::none;
        p.offload_device_fraction = 1.0;
        const LayoutCost layout = model_.layout_cost(p);
        state.searched += inner;
        if (layout.reject != Reject::none) {
          state.rejected[std::size_t(layout.reject)] += inner;
          continue;
        }
        finish_variants(item, layout, p, state);
      }
    }
  }

 private:
  static int zero_max(const OuterItem& item) { return item.dp * item.sp > 1 ? 3 : 0; }
  int schedules(const OuterItem& item) const {
    return item.pp == 1 ? 1 : 2 + int(options_.virtual_stage_choices.size());
  }

  // Every ZeRO stage, offload and schedule of one priced layout.
  void finish_variants(const OuterItem& item, const LayoutCost& layout, ParallelConfig p, WorkerState& state) const {
    Estimate estimate;
    for (int zero = 0; zero <= zero_max(item); ++zero) {
      p.zero = zero;
      for (auto [offload, fraction] : offloads_) {
        p.offload = offload;
        p.offload_device_fraction = fraction;
        for (int s = 0; s < schedules(item); ++s) {
          if (item.pp == 1) {
            p.schedule = Schedule::one_f_one_b;
            p.virtual_stages = 1;
          } else if (s < 2) {
            p.schedule = s == 0 ? Schedule::gpipe : Schedule::one_f_one_b;
            p.virtual_stages = 1;
          } else {
            p.schedule = Schedule::interleaved;
            p.virtual_stages = options_.virtual_stage_choices[s - 2];
            const Reject schedule_reject = check_layout(model_.model(), model_.train(), p);
            if (schedule_reject != Reject::none) {
              ++state.rejected[std::size_t(schedule_reject)];
              continue;
            }
          }
          model_.finish(p, layout, estimate, true);
          ++state.priced;
          if (options_.on_plan) options_.on_plan(estimate);
          if (estimate.reject != Reject::none) {
            ++state.rejected[std::size_t(estimate.reject)];
            continue;
          }
          ++state.valid;
          keep_best(state, estimate, kept_candidates(options_.top_k));
        }
      }
    }
  }

  const CostModel& model_;
  const SearchOptions& options_;
  const std::vector<int>& batch_divisors_;
  const std::vector<std::pair<OffloadMode, double>>& offloads_;
  std::function<bool()> should_stop_;
};

// Calls `report` (fraction done, seconds) every 100 ms from its own thread until destroyed.
class ProgressMonitor {
 public:
  ProgressMonitor(std::function<void(double, double)> report, std::function<double()> fraction_done)
      : report_(std::move(report)), fraction_done_(std::move(fraction_done)) {
    if (!report_) return;
    const auto start = std::chrono::steady_clock::now();
    thread_ = std::thread([this, start] {
      std::unique_lock lock(mutex_);
      while (!wake_.wait_for(lock, std::chrono::milliseconds(100), [&] { return finished_; })) {
        report_(fraction_done_(), std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
    });
  }
  ~ProgressMonitor() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard lock(mutex_);
      finished_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  ProgressMonitor(const ProgressMonitor&) = delete;
  ProgressMonitor& operator=(const ProgressMonitor&) = delete;

 private:
  std::function<void(double, double)> report_;
  std::function<double()> fraction_done_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool finished_ = false;
  std::thread thread_;
};

}  // namespace

SearchResult search(const CostModel& model, const SearchOptions& options) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const std::vector<OuterItem> items = outer_items(model.gpus(), model.model().moe.experts,
                                                   model.costs().device().kind == "gpu" ? model.gpus() / model.nodes() : 1);
  const std::vector<int> batch_divisors = divisors(model.train().global_batch);
  std::vector<std::pair<OffloadMode, double>> offloads{{OffloadMode::none, 1.0}, {OffloadMode::optimizer, 1.0}};
  for (double fraction : options.chunked_device_fractions) offloads.emplace_back(OffloadMode::chunked, fraction);

  const int threads = options.threads > 0 ? options.threads : tbb::info::default_concurrency();
  tbb::task_arena arena(threads);
  tbb::enumerable_thread_specific<WorkerState> states;
  std::atomic<std::int64_t> items_done{0};
  std::atomic<bool> cancelled{false};
  auto should_stop = [&] {
    if (options.cancel != nullptr && options.cancel->load(std::memory_order_relaxed)) {
      cancelled.store(true, std::memory_order_relaxed);
      return true;
    }
    return false;
  };
  const ItemSearch item_search(model, options, batch_divisors, offloads, should_stop);
  {
    const ProgressMonitor monitor(options.on_progress, [&] {
      return double(items_done.load()) / double(std::max<std::size_t>(items.size(), 1));
    });
    arena.execute([&] {
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, items.size(), 1),
                        [&](const tbb::blocked_range<std::size_t>& range) {
                          WorkerState& state = states.local();
                          for (std::size_t i = range.begin(); i != range.end(); ++i) {
                            if (should_stop()) return;
                            item_search.visit(items[i], state);
                            items_done.fetch_add(1, std::memory_order_relaxed);
                          }
                        });
    });
  }

  SearchResult result;
  result.threads = threads;
  for (auto& state : states) {
    result.searched += state.searched;
    result.priced += state.priced;
    result.valid += state.valid;
    for (std::size_t i = 0; i < result.rejected.size(); ++i) result.rejected[i] += state.rejected[i];
    result.best.insert(result.best.end(), state.heap.begin(), state.heap.end());
  }
  // The kept plans priced in full: the schedule's critical path and the breakdown.
  for (Estimate& estimate : result.best) estimate = model.estimate(estimate.parallel);
  std::sort(result.best.begin(), result.best.end(), ranks_before);
  if (int(result.best.size()) > options.top_k) result.best.resize(std::max(options.top_k, 0));
  result.cancelled = cancelled.load();
  result.cost_flags = model.costs().flags();
  result.wall_s = std::chrono::duration<double>(clock::now() - start).count();
  return result;
}

}  // namespace tessel::planner
