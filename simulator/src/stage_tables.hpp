// What the replay reads of one stage program, worked out once per stage instead of per
// rank and op: each compute op's seconds, the ops each actor runs in order, which
// consecutive compute ops may run as one sleep, the in-flight marks of the memory
// counter and the pipeline transfers' edges.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "tessel/core/program.hpp"
#include "tessel/profiles/cost_lookup.hpp"

namespace tessel::simulator {

inline bool is_communication(const ProgramOp& op) {
  return op.work.kind == OpKind::collective || op.work.kind == OpKind::send || op.work.kind == OpKind::recv;
}
// Busy time of the compute stream (host optimizer steps included, copies not).
inline bool computes(const ProgramOp& op) { return op.stream == Stream::compute && !is_communication(op); }

struct StageTables {
  // Compute ops: profile time plus the calibrated layer overhead and tp_comm_overlap's
  // adjustment; 0 for the others.
  std::vector<double> seconds;
  // The op lists of the rank's actors: one per stream with overlap, else one in
  // sequential order (data-parallel collectives deferred until something needs them).
  std::vector<std::vector<std::uint32_t>> actor_ops;
  // Per actor list position: the op there and the next one may run as one sleep (both
  // compute, nothing else waits for the first, the second waits for nothing unfinished).
  std::vector<std::vector<bool>> joins_next;
  // +1 where a micro-batch chunk's forward starts the stage's first block, -1 where its
  // backward ends it (the activation counter), else 0.
  std::vector<int> in_flight_change;
  // Pipeline sends and receives: the micro-batch, the virtual stage that sends, the pass.
  struct Edge {
    int micro_batch = 0, source_virtual_stage = 0, backward = 0;
  };
  std::vector<Edge> edges;
};

// `overlap`: one actor per stream, else one in sequential order. `join`: allow merged
// sleeps (off where a trace or the contention ledger needs every op's own times).
StageTables stage_tables(const Program& program, int stage, const profiles::CostLookup& costs, bool overlap,
                         bool join);

}  // namespace tessel::simulator
