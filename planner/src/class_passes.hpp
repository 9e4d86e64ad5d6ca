// Each class of a pipeline's stages for one micro-batch: its chunks' forward and backward
// passes from the layout's units plus what its summary moves per micro-batch (gathers,
// reduce-scatters, host fetches, grid sums, tp_comm_overlap's exposed time), and what the
// step's tail and the breakdown read of them. Worked out once per layout and per pass
// variant (ZeRO stage, offload, schedule) and kept on the layout cost (class_passes.cpp).
#pragma once

#include <array>
#include <vector>

#include "stage_steps.hpp"

namespace tessel::planner {

struct ClassPasses {
  std::size_t first_chunk = 0;  // into ClassPassTable's chunk arrays
  double compute_s = 0, backward_compute_s = 0;
  double hideable_s = 0, hidden_s = 0;  // per micro-batch data-parallel traffic and the compute beside it
  double deferred_sync_s = 0;           // without overlap: per micro-batch syncs left to the step's end
  double last_backward_s = 0;           // grid sums when the stage's last backwards are done
  double per_micro_batch_s = 0;         // all its chunks' passes, sends apart
};

// What the breakdown reads of a class, per micro-batch: its time by kind over all its
// chunks, forward and backward, and its traffic.
struct ClassDetail {
  std::array<double, std::size_t(TimeKind::count)> kinds{};
  CommVolume comm;  // tensor, ring and expert
  double dp_bytes = 0, dp_messages = 0, copy_bytes = 0;
};

// The passes of every class, and per class and chunk the forward, the backward (sends
// apart) and what a backward leaves for its stage's next pass (pipeline_span_s).
struct ClassPassTable {
  int chunks_per_class = 1;  // the schedule's chunks per stage, or 1 where each class is read whole
  std::vector<ClassPasses> classes;
  std::vector<ClassDetail> details;  // with detail only
  std::vector<double> forward_s, backward_s, deferred_s;
};

// A class's step after its last pass: before the tied embedding's sum (which waits for
// both ends of the pipeline) its blocks' syncs, after it the stage's own, the update,
// gathers and copies; by kind, and in all.
struct ClassTail {
  double tp_comm_s = 0, dp_comm_s = 0, optimizer_s = 0, offload_s = 0;
  double total_s = 0, before_tied_s = 0;
  double most_sends_s = 0, all_sends_s = 0;  // per micro-batch: its busiest stage's, all its stages'
  const ChunkTotals* chunks = nullptr;       // offload of dense models: the chunk plan's totals
};

}  // namespace tessel::planner
