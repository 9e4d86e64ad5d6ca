// The analytic cost model: what one training step of a plan costs, priced from the same
// descriptions the Program is lowered from (core's block-op table and stage summaries)
// through the profiles' CostLookup. layout_cost() prices a layout's passes per micro-batch;
// finish() adds what the stage summaries move under a ZeRO stage, offload and schedule,
// and the pipeline's span. The terms and their sources: docs/COST_MODEL.md.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "tessel/core/block_ops.hpp"
#include "tessel/core/chunk_totals.hpp"
#include "tessel/core/cluster_spec.hpp"
#include "tessel/core/model_spec.hpp"
#include "tessel/core/model_states.hpp"
#include "tessel/core/plan.hpp"
#include "tessel/core/train_spec.hpp"
#include "tessel/planner/estimate.hpp"
#include "tessel/profiles/cost_lookup.hpp"
#include "tessel/profiles/profile.hpp"

namespace tessel::planner {

struct ClassShape;
struct StageClass;
struct ClassPasses;
struct ClassPassTable;
struct ClassTail;

// What one unit of a pipeline stage's pass costs per micro-batch, by kind (gemm..ep_comm;
// the backward includes the recompute mode's replay): a dense block, an MoE block, the
// last stage's head and loss, the first stage's embedding.
struct PassPrice {
  std::array<double, std::size_t(TimeKind::count)> forward_s{}, backward_s{};
  // Per micro-batch, forward, its replay and backward: tensor, ring and expert traffic.
  CommVolume comm;
  double forward_total_s() const;
  double backward_total_s() const;
  double forward_compute_s() const;   // gemm, attention, elementwise
  double backward_compute_s() const;  // the same and the replay
};

// parallel.tp_comm_overlap: a sequence-parallel gather or scatter pipelined with a GEMM of
// its block, both priced per block (forward, backward); their time is in no PassPrice kind
// until finish() prices what the GEMM does not hide (cost_tp_overlap.cpp).
struct TpOverlapPair {
  double comm_forward_s = 0, comm_backward_s = 0, gemm_forward_s = 0, gemm_backward_s = 0;
};
struct TpOverlapPairs {
  std::array<TpOverlapPair, 4> pairs{};
  int count = 0;
};

// One micro-batch of a layout (its dp, pp, tp grid, sp, ep, micro-batch and recompute),
// priced by unit, before ZeRO, offload and the schedule; and what its fullest stage holds.
struct LayoutCost {
  Reject reject = Reject::none;
  PassPrice dense, moe, head, embedding;
  TpOverlapPairs dense_overlap, moe_overlap;
  double p2p_bytes = 0;                     // one activation (or its gradient) between stages
  double p2p_intra_s = 0, p2p_inter_s = 0;  // that send inside a node, between nodes
  int stages_per_node = 1;
  double block_tp_forward_bytes = 0, block_tp_forward_messages = 0;  // one dense block's, forward
  // Memory: the fullest stage's activations per micro-batch; with an uneven split, the
  // blocks of the first, second and last stage over the fullest stage's.
  double activation_bytes_per_micro_batch = 0;
  double first_stage_layer_share = 1, second_stage_layer_share = 1, last_stage_layer_share = 1;
  double rematerialised_bytes = 0;  // full and selective-op recompute: one layer rebuilt in the backward
  double logits_bytes = 0;          // last stage, one micro-batch
  // The trainer's temporaries (trainer_temporaries.cpp) of a stage without and with the head.
  double temporaries_bytes = 0, last_stage_temporaries_bytes = 0;
  double stage_parameters = 0;  // parameters held by one rank of the fullest stage, before ZeRO
  double layer_parameters = 0;  // one dense block's on one rank (the ZeRO-3 gather unit)
  double layers_on_stage = 0;   // blocks of the fullest stage
  // MoE blocks on the fullest stage; per MoE block the weights every data-parallel rank holds
  // and its routed experts'.
  double moe_layers_on_stage = 0, moe_layer_parameters = 0, expert_parameters = 0;
  // fp8 training: the fullest stage's fp8 GEMM weight elements and fp8 linears.
  double fp8_weight_elements = 0, fp8_linears = 0;
  // The shares of a dense block's and of an MoE block's (experts included) parameters that
  // are fp8 GEMM weights: held in fp8 under train.fp8_param_gather.
  double fp8_dense_share = 0, fp8_moe_share = 0;
  // What finish() works out from the units alone for each shape of the pipeline's stages
  // (class_passes.cpp), kept for the layout's other variants; a layout cost is finished by
  // one thread at a time.
  struct StageUnits;
  mutable std::shared_ptr<StageUnits> stage_units;
  // Names these prices among all a process makes, for the per-thread table of class
  // passes (class_passes.cpp); renewed whenever the prices change.
  std::uint64_t prices_id = next_prices_id();
  static std::uint64_t next_prices_id();

  // Applies f(this_time, other_time) to every time held here (the calibration's basis:
  // planner/src/calibrate.cpp), in place; prices_changed() then names the new prices.
  template <class F>
  void zip_times(const LayoutCost& other, F f) {
    auto pass = [&](PassPrice& a, const PassPrice& b) {
      for (std::size_t k = 0; k < a.forward_s.size(); ++k) {
        f(a.forward_s[k], b.forward_s[k]);
        f(a.backward_s[k], b.backward_s[k]);
      }
    };
    auto pairs = [&](TpOverlapPairs& a, const TpOverlapPairs& b) {
      for (int i = 0; i < a.count; ++i) {
        TpOverlapPair& x = a.pairs[std::size_t(i)];
        const TpOverlapPair& y = b.pairs[std::size_t(i)];
        f(x.comm_forward_s, y.comm_forward_s);
        f(x.comm_backward_s, y.comm_backward_s);
        f(x.gemm_forward_s, y.gemm_forward_s);
        f(x.gemm_backward_s, y.gemm_backward_s);
      }
    };
    pass(dense, other.dense);
    pass(moe, other.moe);
    pass(head, other.head);
    pass(embedding, other.embedding);
    pairs(dense_overlap, other.dense_overlap);
    pairs(moe_overlap, other.moe_overlap);
    f(p2p_intra_s, other.p2p_intra_s);
    f(p2p_inter_s, other.p2p_inter_s);
  }
  void prices_changed() {
    stage_units.reset();
    prices_id = next_prices_id();
  }
};

class CostModel {
 public:
  CostModel(ModelSpec model, TrainSpec train, ClusterSpec cluster, int nodes, int gpus_per_node,
            const profiles::Profile& profile);
  // Resolves the plan's device profile (the database at `db_path`, default location
  // when empty, else the shipped one) and uses the plan's placement.
  static CostModel for_plan(const Plan& plan, const std::string& db_path = "");

  const ModelSpec& model() const { return model_; }
  const TrainSpec& train() const { return train_; }
  const ClusterSpec& cluster() const { return cluster_; }
  const profiles::CostLookup& costs() const { return costs_; }
  int nodes() const { return nodes_; }
  int gpus() const { return nodes_ * gpus_per_node_; }
  int seq_len() const { return seq_; }

  // Overlap of data-parallel and ZeRO traffic with compute (on by default). Off, every
  // byte of it is exposed: the model a simulation without stream overlap agrees with.
  void set_overlap(bool overlap) { overlap_ = overlap; }
  bool overlap() const { return overlap_; }

  // Every estimate prices the pipeline's span in closed form, as the search ranks plans:
  // for fits that price each run thousands of times (calibrate.cpp).
  void set_closed_form_pipeline(bool closed_form) { closed_form_pipeline_ = closed_form; }

  // Prices later estimates under other calibration parameters (the fit's inner loop);
  // the profile's own are used until then.
  void set_calibration(const profiles::Calibration& calibration);

  // Full prediction for one layout (the world size must be gpus()): the pipeline's span is
  // the critical path of its schedule (core's pipeline_span_s).
  Estimate estimate(const ParallelConfig& parallel) const;

  // The two halves of estimate(), for the search. `pipeline_bound`: the pipeline's span
  // in closed form (exact for GPipe and even pipelines, above the critical path where
  // stages differ), which the search ranks by before it prices its kept plans exactly;
  // it sets step, memory and fit only, and leaves the breakdown (time_s, comm) as it was.
  LayoutCost layout_cost(const ParallelConfig& parallel) const;
  void finish(const ParallelConfig& parallel, const LayoutCost& layout, Estimate& out,
              bool pipeline_bound = false) const;

  // Training FLOPs of one step of the whole model (forward + backward, no recompute).
  double model_flops_per_step() const { return model_flops_per_step_; }
  // Forward FLOPs per token, split into GEMMs (incl. LM head) and attention scores.
  double forward_gemm_flops_per_token() const { return forward_gemm_flops_per_token_; }
  double forward_attention_flops_per_token() const { return forward_attention_flops_per_token_; }
  // Activation bytes one rank stores per layer for one micro-batch (Korthikanti), under
  // the layout's recompute mode or another one. `moe_block`: an MoE block's (model.moe),
  // with its dispatched tokens.
  double activation_bytes_per_layer(const ParallelConfig& parallel, bool moe_block = false) const;
  double activation_bytes_per_layer(const ParallelConfig& parallel, Recompute recompute, bool moe_block = false) const;
  // Full recompute: the activations of the one layer being recomputed in the backward,
  // held on top of the stored block inputs (0 for the other modes); an MoE block's when
  // the stage has one (the larger of the two).
  double rematerialised_bytes(const ParallelConfig& parallel, bool moe_block = false) const;
  // The trainer's temporaries of one layer's forward and backward (and the logits'
  // gradient on the last stage): workspace beside the profile's (trainer_temporaries.cpp).
  double trainer_temporaries_bytes(const ParallelConfig& parallel, bool last_stage) const;
  // CPU ranks: MPI's temporaries of the in-flight gradient all-reduces, the stage's
  // gradient bytes (0 on GPUs, on one rank, under ZeRO 2/3).
  double reduction_scratch_bytes(const ParallelConfig& parallel, double stage_gradient_bytes) const;
  // Bytes per parameter for weights, gradients and optimizer states.
  double parameter_bytes() const { return param_bytes_; }
  double gradient_bytes() const { return grad_bytes_; }
  double optimizer_bytes_per_parameter() const { return optimizer_bytes_; }

  // The stages of a layout under a ZeRO stage, offload and schedule, priced from their
  // summaries (stage_steps.hpp); cached per layout shape.
  struct StageSteps;

 private:
  // layout_cost()'s parts (cost_layout.cpp): where each group sits on nodes, the ops of a
  // list priced by kind.
  struct Groups;
  struct Prices;
  Groups group_placements(const ParallelConfig& parallel) const;
  // `replayed`: the recompute mode whose replay (BlockOp::replayed_share) the prices tally.
  Prices price(const std::vector<BlockOp>& ops, const Groups& groups, Recompute replayed = Recompute::none) const;
  PassPrice pass_price(const Prices& prices, bool block, Recompute recompute) const;
  void add_stage_states(const ParallelConfig& parallel, const BlockOpTable& table, LayoutCost& c) const;
  // finish()'s parts. The stage summaries of a variant, priced (stage_steps.cpp); valid
  // until the calibration changes.
  const StageSteps* stage_steps(const ParallelConfig& parallel) const;
  // Prices `steps` from their summaries under the calibration of the moment.
  void price_stage_steps(const ParallelConfig& parallel, StageSteps& steps) const;
  // Each class of stages' passes per micro-batch (class_passes.cpp); with `detail` chunk by
  // chunk and by kind, else each class as one chunk. Variants that pass alike share one.
  // `chunk_totals`: per class, with offload of a dense model, its chunk plan's totals.
  const ClassPassTable& class_passes(const ParallelConfig& parallel, const LayoutCost& c, const StageSteps& steps,
                                     int micro_batches, bool detail, const std::vector<ChunkTotals>& chunk_totals) const;
  void compute_class_passes(const ParallelConfig& parallel, const LayoutCost& c, const StageSteps& steps,
                            int micro_batches, bool detail, const std::vector<ChunkTotals>& chunk_totals,
                            ClassPassTable& out) const;
  // Returns the seconds of fetches the passes expose.
  double add_chunk_fetches(const ParallelConfig& parallel, const ClassShape& stage, const StageClass& traffic,
                           const ChunkTotals& totals, int micro_batches, double efficiency, ClassPasses& passes,
                           ClassPassTable& out) const;
  // A class's step tail (cost_finish.cpp).
  void class_tail(const StageClass& traffic, const ClassPasses& passes, const ChunkTotals& chunk_totals,
                  int micro_batches, ClassTail& out) const;
  // The chunk packing of a stage (offload of dense models), of one chunk per stage or of
  // the plan's interleaved chunks.
  std::shared_ptr<const ChunkStageShape> chunk_shape_of(const ParallelConfig& parallel, int stage,
                                                        bool interleaved) const;
  // `chunk_totals`: with offload of a dense model, the chunk plan's totals of each class of stages.
  void add_memory(const ParallelConfig& parallel, const LayoutCost& c, int micro_batches, Estimate& out,
                  const std::vector<const ChunkTotals*>& chunk_totals) const;
  // tp_comm_overlap (cost_tp_overlap.cpp): per block, the exposed part of each overlapped
  // collective and its GEMM's slowdown in the forward and backward.
  struct TpOverlapCost {
    double exposed_forward_s = 0, exposed_backward_s = 0, slowed_forward_s = 0, slowed_backward_s = 0;
  };
  TpOverlapCost tp_overlap_cost(const ParallelConfig& parallel, const TpOverlapPairs& pairs) const;

  ModelSpec model_;
  TrainSpec train_;
  ClusterSpec cluster_;
  int nodes_;
  int gpus_per_node_;
  profiles::CostLookup costs_;
  int seq_;
  bool overlap_ = true;
  bool closed_form_pipeline_ = false;
  double element_bytes_;
  bool cpu_ranks_ = false;  // the device is a CPU: MPI's reduction temporaries are in its memory
  double param_bytes_, grad_bytes_, optimizer_bytes_, optimizer_traffic_bytes_;
  ModelStateBytes chunk_states_;  // chunk_state_bytes(train_)
  double forward_gemm_flops_per_token_ = 0;
  double forward_attention_flops_per_token_ = 0;
  double model_flops_per_step_ = 0;
  struct StepsCache;
  struct ChunkShapeCache;
  std::shared_ptr<StepsCache> steps_cache_;
  std::uint64_t rates_id_ = 0;  // renewed when a calibration moves the cost lookup's rates
  std::shared_ptr<ChunkShapeCache> chunk_shapes_;
};

}  // namespace tessel::planner
