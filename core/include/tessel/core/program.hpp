// The Program: what every rank does in one training step, as ordered ops on streams with the
// cross-stream dependencies a real runtime has; the shared language of planner, simulator and
// executor. Ranks of one pipeline stage run the same ops (their coordinates change peers, not
// work), so a Program holds one op list per stage. Op ids ("mb3/L12/fwd/mlp.fc1") are stable so
// predicted and measured events line up; docs/PROGRAM.md, "Op ids", lists every form.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessel/core/block_ops.hpp"
#include "tessel/core/plan.hpp"
#include "tessel/core/rank_layout.hpp"
#include "tessel/core/stream.hpp"
#include "tessel/core/schedule.hpp"

namespace tessel {


struct ProgramOp {
  std::string id;
  Stream stream = Stream::compute;
  // The work, backward multipliers already applied (a backward GEMM has count 2x). Under
  // tp_comm_overlap, work.tp_overlap_gemm names the GEMM of the same pass (fwd, bwd,
  // recompute) a sequence-parallel collective is pipelined with; the simulator prices
  // the pair as the planner does (simulator/src/tp_overlap.cpp).
  BlockOp work;
  int peer_offset = 0;  // send/recv: +1 to the next virtual stage, -1 to the previous
  bool on_host = false;  // runs in host memory (offloaded optimizer shards)
  // Offload copies under ZeRO: the bytes each position of the gradient group moves (its
  // shards differ); work.bytes is the most of them. Empty: every rank moves work.bytes.
  std::vector<double> rank_bytes;
  // Ops of the same program that must finish before this one starts; always earlier
  // in the list. Ops on one stream also run in list order.
  std::vector<std::uint32_t> deps;
};

struct StageProgram {
  int stage = 0;
  std::vector<ProgramOp> ops;
};

class Program {
 public:
  // Lowers a validated plan.
  static Program lower(const Plan& plan);

  const Plan& plan() const { return plan_; }
  int world_size() const { return plan_.parallel.world_size(); }
  int stages() const { return plan_.parallel.pp; }
  int micro_batches() const { return micro_batches_; }
  const StageProgram& stage(int s) const { return stages_.at(std::size_t(s)); }
  const RankLayout& layout() const { return layout_; }
  int stage_of_rank(int rank) const { return layout_.stage_of(rank); }
  const StageProgram& rank_program(int rank) const { return stage(stage_of_rank(rank)); }
  std::size_t op_count() const;  // over the distinct stage programs
  // The bytes `op` of rank_program(rank) moves on that rank (ProgramOp::rank_bytes).
  double op_bytes_of_rank(int rank, const ProgramOp& op) const;

 private:
  Plan plan_;
  RankLayout layout_{ParallelConfig{}};
  int micro_batches_ = 0;
  std::vector<StageProgram> stages_;
};

}  // namespace tessel
