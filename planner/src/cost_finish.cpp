// A layout's cost under a ZeRO stage, offload and schedule: each class of stages' passes
// (class_passes.cpp), the pipeline's span over the schedule, then each stage's tail after
// its last pass; the step ends with the last stage to finish.
#include <algorithm>
#include <array>
#include <cstdint>

#include "class_passes.hpp"
#include "cost_parts.hpp"
#include "tessel/core/schedule.hpp"
#include "tessel/core/stage_layers.hpp"

namespace tessel::planner {

namespace {

constexpr std::size_t kKinds = std::size_t(TimeKind::count);

// Scratch reused across calls on a thread: the search finishes millions of plans.
struct Scratch {
  std::vector<ClassTail> tails;
  std::vector<double> forward_s, backward_s, deferred_s, last_backward_s, stage_end_s;  // per virtual stage
  std::vector<const ChunkTotals*> chunk_totals;
};

// Each class's chunk plan totals (offload of dense models: its fetches, tail, memory),
// the same for every recompute mode and schedule of a variant and micro-batch size: a
// small table per thread keeps the recent ones by the class's packing (its entries name
// their steps cache): the schedules of a variant share the packings of their classes.
const std::vector<ChunkTotals>& class_chunk_totals(const CostModel::StageSteps& steps, std::uint64_t cache_id,
                                                   const TrainSpec& train, const ParallelConfig& p, int m,
                                                   const ModelStateBytes& states) {
  if (!steps.chunk_planned) {
    thread_local std::vector<ChunkTotals> none;
    if (none.size() < steps.classes.size()) none.resize(steps.classes.size());
    return none;
  }
  thread_local std::vector<ChunkTotals> out;
  out.resize(steps.classes.size());
  struct Slot {
    std::uint64_t cache = 0;
    const ChunkStageShape* shape = nullptr;
    int zero = -1, offload = -1, micro_batches = 0;
    double device_fraction = -1;
    ChunkTotals totals;
  };
  thread_local std::array<Slot, 256> recent;
  for (std::size_t k = 0; k < steps.classes.size(); ++k) {
    const ChunkStageShape* shape = steps.classes[k].chunk_shape.get();
    if (shape == nullptr) {
      out[k] = ChunkTotals{};
      continue;
    }
    const std::size_t h = std::size_t(reinterpret_cast<std::uintptr_t>(shape)) ^ (std::size_t(m) << 5) ^
                          (std::size_t(p.zero) << 1) ^ (std::size_t(p.offload) << 3) ^ bits_of(p.offload_device_fraction);
    Slot& slot = recent[mixed_hash(h) % recent.size()];
    if (!(slot.cache == cache_id && slot.shape == shape && slot.zero == p.zero && slot.offload == int(p.offload) &&
          slot.micro_batches == m && slot.device_fraction == p.offload_device_fraction)) {
      slot.totals = chunk_totals(*shape, train, p, m, states);
      slot.cache = cache_id, slot.shape = shape, slot.zero = p.zero, slot.offload = int(p.offload);
      slot.micro_batches = m, slot.device_fraction = p.offload_device_fraction;
    }
    out[k] = slot.totals;
  }
  return out;
}

// When the pipeline's passes end: the span, the ends of the first and the last stage, and
// with the schedule's critical path every stage's (stage_end_s).
struct PipelineEnds {
  double span_s = 0, first_end_s = 0, last_end_s = 0;
};

// The critical path of the schedule over every virtual stage's passes and sends.
PipelineEnds critical_path(const ParallelConfig& p, const LayoutCost& c, const StageShape& shape,
                           const ClassPassTable& table, int m, Scratch& scratch) {
  const int v = chunks_per_stage(p), virtual_count = p.pp * v;
  // Stages fill nodes in blocks of stages_per_node (stage_steps.cpp).
  auto crosses = [&](int from, int to) { return from / c.stages_per_node != to / c.stages_per_node; };
  for (auto* list : {&scratch.forward_s, &scratch.backward_s, &scratch.deferred_s, &scratch.last_backward_s}) {
    list->assign(std::size_t(virtual_count), 0.0);
  }
  for (int s = 0; s < p.pp; ++s) {
    const std::size_t k = std::size_t(shape.class_of_stage[std::size_t(s)]);
    const ClassShape& stage = shape.classes[k];
    const ClassPasses& passes = table.classes[k];
    for (int chunk = 0; chunk < v; ++chunk) {
      const std::size_t vs = std::size_t(virtual_stage(s, chunk, p.pp)), at = passes.first_chunk + std::size_t(chunk);
      const double forward_send_s =
          int(vs) < virtual_count - 1 ? (crosses(s, (s + 1) % p.pp) ? c.p2p_inter_s : c.p2p_intra_s) : 0.0;
      const double backward_send_s = vs > 0 ? (crosses(s, (s + p.pp - 1) % p.pp) ? c.p2p_inter_s : c.p2p_intra_s) : 0.0;
      scratch.forward_s[vs] = table.forward_s[at] + forward_send_s;
      scratch.backward_s[vs] = table.backward_s[at] + backward_send_s;
      scratch.deferred_s[vs] = table.deferred_s[at];
      const auto [dense, moe] = stage.chunk_blocks[std::size_t(chunk)];
      scratch.last_backward_s[vs] = stage.blocks > 0 ? passes.last_backward_s * (dense + moe) / stage.blocks : 0.0;
    }
  }
  PipelineEnds ends;
  ends.span_s = pipeline_span_s(p.schedule, p.pp, m, v, scratch.forward_s, scratch.backward_s, scratch.last_backward_s,
                                scratch.deferred_s, &scratch.stage_end_s);
  ends.first_end_s = scratch.stage_end_s.front();
  ends.last_end_s = scratch.stage_end_s.back();
  return ends;
}

// Closed forms: GPipe's is exact (two flow shops of identical micro-batches); under 1F1B
// the slowest stage runs every micro-batch and the others one; interleaved passes the
// others' work over the chunks. `paced_s`: the slowest stage's time per micro-batch.
PipelineEnds closed_form(const ParallelConfig& p, const LayoutCost& c, const StageShape& shape,
                         const ClassPassTable& table, const std::vector<ClassTail>& tails, int m, double paced_s) {
  const int v = chunks_per_stage(p);
  const int table_chunks = table.chunks_per_class;
  double all_s = 0, last_backwards_s = 0, most_forward_s = 0, most_backward_s = 0;
  for (std::size_t k = 0; k < shape.classes.size(); ++k) {
    const ClassShape& stage = shape.classes[k];
    const ClassPasses& passes = table.classes[k];
    all_s += stage.stages * passes.per_micro_batch_s + tails[k].all_sends_s;
    last_backwards_s += stage.stages * passes.last_backward_s;
    for (int chunk = 0; chunk < table_chunks; ++chunk) {
      const std::size_t at = passes.first_chunk + std::size_t(chunk);
      most_forward_s = std::max(most_forward_s, table.forward_s[at] + c.p2p_inter_s * (stage.most_sends.forward_inter > 0));
      most_backward_s = std::max(most_backward_s, table.backward_s[at] + table.deferred_s[at] +
                                                      c.p2p_inter_s * (stage.most_sends.backward_inter > 0));
    }
  }
  PipelineEnds ends;
  ends.span_s = last_backwards_s + (p.schedule == Schedule::gpipe         ? all_s + (m - 1) * (most_forward_s + most_backward_s)
                                    : p.schedule == Schedule::one_f_one_b ? all_s + (m - 1) * paced_s
                                                                          : m * paced_s + (all_s - paced_s) / v);
  // The last micro-batch's backward reaches the last stage before the stages ahead of it.
  const ClassShape& last = shape.classes[std::size_t(shape.class_of_stage.back())];
  double before_last_s = 0;
  for (std::size_t k = 0; k < shape.classes.size(); ++k) {
    before_last_s += last.stages_before[k] * (table.classes[k].per_micro_batch_s + tails[k].most_sends_s) / 2 / v;
  }
  ends.first_end_s = ends.span_s;
  ends.last_end_s = ends.span_s - before_last_s;
  return ends;
}

// A step's traffic over the gradient group of the class of stages that moves the most over
// it (the first, with the embedding, or the last, with the head).
Traffic busiest_gradient_traffic(const CostModel::StageSteps& steps, const ClassPassTable& table, int m) {
  Traffic busiest;
  busiest.bytes = -1;
  for (std::size_t k = 0; k < steps.classes.size(); ++k) {
    const StageClass& stage = steps.classes[k];
    Traffic step{0, m * table.details[k].dp_bytes, m * table.details[k].dp_messages};
    for (const Traffic* part : {&stage.block_sync, &stage.stage_sync, &stage.step_gather, &stage.tied}) step.add(*part);
    if (step.bytes > busiest.bytes) busiest = step;
  }
  return busiest;
}

}  // namespace

void CostModel::class_tail(const StageClass& traffic, const ClassPasses& passes, const ChunkTotals& chunks, int m,
                           ClassTail& out) const {
  out = ClassTail{};
  const profiles::Calibration& calibration = costs_.calibration();
  const double efficiency = overlap_ ? calibration.overlap_efficiency : 0.0;
  const double sync_s = traffic.block_sync.time_s + traffic.stage_sync.time_s + traffic.step_gather.time_s;
  const double hidden_sync_s = efficiency * passes.backward_compute_s;
  // Hidden traffic still slows the compute it runs beside (NCCL's kernels take SMs and
  // memory bandwidth): a calibrated fraction of each hidden second (0 by default).
  const double slowed_s = calibration.collective_contention *
                          (std::min(sync_s, hidden_sync_s) + m * std::min(passes.hideable_s, passes.hidden_s));
  const double deferred_s = m * passes.deferred_sync_s;
  out.before_tied_s = overlap_ ? 0.0 : traffic.block_sync.time_s + deferred_s;
  out.tp_comm_s = traffic.stage_grid.time_s;  // in the chain: nothing hides it
  out.dp_comm_s = std::max(0.0, sync_s - hidden_sync_s) + deferred_s + traffic.tied.time_s + slowed_s;
  if (traffic.chunk_shape) {
    out.chunks = &chunks;
    out.optimizer_s = costs_.memory_time_s(chunks.device_optimizer_elements * optimizer_traffic_bytes_) +
                      costs_.host_memory_time_s(chunks.host_optimizer_elements * optimizer_traffic_bytes_);
    out.offload_s = costs_.host_device_time_s(chunks.host_to_device_bytes + chunks.device_to_host_bytes - chunks.fetch_bytes);
  } else {
    out.optimizer_s = traffic.optimizer_s;
    out.offload_s = traffic.copy_s;
  }
  out.optimizer_s += traffic.fp8_step_cast_s;
  out.total_s = out.tp_comm_s + out.dp_comm_s + out.optimizer_s + out.offload_s;
}

void CostModel::finish(const ParallelConfig& p, const LayoutCost& c, Estimate& out, bool pipeline_bound) const {
  out.parallel = p;
  out.reject = c.reject;
  if (c.reject != Reject::none) {
    out.time_s.fill(0);
    out.comm = {};
    return;
  }
  const int m = train_.global_batch / (p.dp * p.micro_batch);
  out.micro_batches = m;
  const StageSteps& steps = *stage_steps(p);
  const StageShape& shape = *steps.shape;
  // The search ranks by step and memory alone: the breakdown is for the plans it keeps.
  const bool detail = !pipeline_bound;
  thread_local Scratch scratch;
  const std::size_t class_count = shape.classes.size();
  const std::vector<ChunkTotals>& chunks = class_chunk_totals(steps, steps_cache_->id, train_, p, m, chunk_states_);
  const ClassPassTable& table = class_passes(p, c, steps, m, detail, chunks);
  scratch.tails.resize(class_count);
  // Each class's tail and sends; the paced class has the most time per micro-batch.
  auto sends_s = [&](const ClassShape::Sends& x) {
    return (x.forward_intra + x.backward_intra) * c.p2p_intra_s + (x.forward_inter + x.backward_inter) * c.p2p_inter_s;
  };
  std::size_t paced = 0;
  double paced_s = -1;
  for (std::size_t k = 0; k < class_count; ++k) {
    ClassTail& tail = scratch.tails[k];
    class_tail(steps.classes[k], table.classes[k], chunks[k], m, tail);
    tail.most_sends_s = sends_s(shape.classes[k].most_sends);
    tail.all_sends_s = sends_s(shape.classes[k].all_sends);
    const double stage_s = table.classes[k].per_micro_batch_s + tail.most_sends_s;
    if (stage_s > paced_s) paced_s = stage_s, paced = k;
  }
  scratch.stage_end_s.clear();
  PipelineEnds ends;
  if (p.pp == 1) {
    ends.span_s = m * table.classes[0].per_micro_batch_s + table.classes[0].last_backward_s;
    ends.first_end_s = ends.last_end_s = ends.span_s;
  } else {
    ends = pipeline_bound || closed_form_pipeline_ ? closed_form(p, c, shape, table, scratch.tails, m, paced_s)
                          : critical_path(p, c, shape, table, m, scratch);
  }

  // ---- each stage's tail after its last pass; the step ends with the last to finish ----
  const std::size_t first_class = std::size_t(shape.class_of_stage.front());
  const std::size_t last_class = std::size_t(shape.class_of_stage.back());
  const double tied_start_s = std::max(ends.first_end_s + scratch.tails[first_class].before_tied_s,
                                       ends.last_end_s + scratch.tails[last_class].before_tied_s);
  double step_s = 0, finishing_pipeline_end_s = 0;
  const ClassTail* finishing = nullptr;
  auto finish_stage = [&](std::size_t k, double end_s) {
    const ClassTail& tail = scratch.tails[k];
    // A tied end starts its sum when both ends are ready; what it waited for is the bubble's.
    const double pipeline_end_s = steps.classes[k].tied.time_s > 0 ? tied_start_s - tail.before_tied_s : end_s;
    if (!finishing || pipeline_end_s + tail.total_s > step_s) {
      step_s = pipeline_end_s + tail.total_s;
      finishing = &tail;
      finishing_pipeline_end_s = pipeline_end_s;
    }
  };
  if (!scratch.stage_end_s.empty()) {
    for (int s = 0; s < p.pp; ++s) {
      finish_stage(std::size_t(shape.class_of_stage[std::size_t(s)]), scratch.stage_end_s[std::size_t(s)]);
    }
  } else {
    finish_stage(first_class, ends.first_end_s);
    if (p.pp > 1) finish_stage(last_class, ends.last_end_s);
    // Other classes end after the stages ahead of their first: taken as the first's end.
    for (std::size_t k = 0; k < class_count; ++k) {
      if (k != first_class && k != last_class) finish_stage(k, ends.first_end_s);
    }
  }
  out.step_time_s = step_s;
  out.tokens_per_s = double(train_.global_batch) * seq_ / step_s;
  out.model_flops_per_step = model_flops_per_step_;
  out.mfu = model_flops_per_step_ / (step_s * gpus() * costs_.device().peak_flops_per_s(train_.precision));
  scratch.chunk_totals.clear();
  for (const ClassTail& tail : scratch.tails) {
    if (tail.chunks) scratch.chunk_totals.push_back(tail.chunks);
  }
  add_memory(p, c, m, out, scratch.chunk_totals);
  if (!detail) return;

  // ---- the breakdown: the paced stage's micro-batches, the rest of the pipeline, the tail ----
  const ClassPasses& pace = table.classes[paced];
  const ClassDetail& paced_detail = table.details[paced];
  const StageClass& paced_stage = steps.classes[paced];
  for (std::size_t kind = 0; kind < kKinds; ++kind) out.time_s[kind] = m * paced_detail.kinds[kind];
  out.time_s[K(TimeKind::tp_comm)] += finishing->tp_comm_s;
  out.time_s[K(TimeKind::dp_comm)] += finishing->dp_comm_s;
  out.time_s[K(TimeKind::optimizer)] += finishing->optimizer_s;
  out.time_s[K(TimeKind::offload)] += finishing->offload_s;
  out.time_s[K(TimeKind::tp_comm)] += pace.last_backward_s;
  out.time_s[K(TimeKind::pp_p2p)] = m * scratch.tails[paced].most_sends_s;
  out.time_s[K(TimeKind::pp_bubble)] = finishing_pipeline_end_s - m * paced_s - pace.last_backward_s;
  // Per rank and step: the paced stage's traffic and its step's; the gradient group's of
  // the busiest stage.
  CommVolume& comm = out.comm;
  comm = paced_detail.comm;
  for (double* volume : {&comm.tp_bytes, &comm.tp_messages, &comm.sp_bytes, &comm.sp_messages, &comm.ep_bytes,
                         &comm.ep_messages}) {
    *volume *= m;
  }
  comm.tp_bytes += paced_stage.block_grid.bytes + paced_stage.stage_grid.bytes;
  comm.tp_messages += paced_stage.block_grid.messages + paced_stage.stage_grid.messages;
  const Traffic gradients = busiest_gradient_traffic(steps, table, m);
  comm.dp_bytes = gradients.bytes;
  comm.dp_messages = gradients.messages;
  const ClassShape::Sends& sends = shape.classes[paced].most_sends;
  const double send_count = sends.forward_intra + sends.forward_inter + sends.backward_intra + sends.backward_inter;
  comm.pp_bytes = m * send_count * c.p2p_bytes;
  comm.pp_messages = m * send_count;
  const ClassTail& paced_tail = scratch.tails[paced];
  comm.offload_bytes = paced_tail.chunks ? paced_tail.chunks->host_to_device_bytes + paced_tail.chunks->device_to_host_bytes
                                         : m * paced_detail.copy_bytes + paced_stage.copy_bytes;
}

}  // namespace tessel::planner
