// The analytic cost model: FLOPs, bytes and messages of every op of a transformer
// step under a parallel layout, turned into time through the profiles' CostLookup.
//
// It is built for the search: everything that depends only on the model, batch and
// cluster is computed once in the constructor; layout_cost() prices one micro-batch
// on one pipeline stage for a (dp, pp, tp, mode, sp, micro_batch, recompute) layout;
// finish() adds what ZeRO, offload and the schedule change. estimate() is the two in
// sequence, so one fixed plan and the search take exactly the same path.
//
// Models (sources in docs/ARCHITECTURE.md):
//  - Activation memory: Korthikanti et al. 2022, "Reducing Activation Recomputation
//    in Large Transformer Models": s*b*h*(34 + 5*a*s/h) bytes per layer with 16-bit
//    activations, 10 + 24/t + 5as/(ht) under 1D TP t, /t with sequence parallel,
//    34/t with selective recompute, 2sbh with full recompute. Scaled by E/2 for fp32.
//    Fused attention stores no 5as/h scores but 4 bytes of statistics per row and head;
//    full recompute also holds the one layer being recomputed (docs/MEMORY.md), as
//    selective-op (torchtitan's op-level policy) does beside the matmul outputs it keeps.
//    fp8 training keeps the linears' saved inputs in fp8 (core/fp8_model.hpp).
//  - Model states: Rajbhandari et al. 2020 (ZeRO), 16 bytes/param for mixed-precision
//    Adam with 16-bit gradients, 18 with fp32 gradients (Megatron-LM's default for
//    bf16, train.gradient_precision), sharded over the data-parallel group by stage.
//  - TP communication per linear: 1D Megatron all-reduces, 2D SUMMA (Optimus, q
//    broadcasts of activation and weight blocks), 2.5D Tesseract (activation blocks
//    further split by depth d, weight-gradient all-reduce over depth), 3D
//    (all-gather inputs and weights, reduce-scatter outputs on q ranks each).
//  - Pipeline: (m + p - 1) micro-batch slots for GPipe and 1F1B, bubble divided by
//    the virtual stages for interleaved (Narayanan et al. 2021); the bubble's p - 1
//    stages carry no head (even split) or run at their own pace (uneven split).
#pragma once

#include <cstdint>
#include <memory>

#include "tessel/core/block_ops.hpp"
#include "tessel/core/chunk_totals.hpp"
#include "tessel/core/cluster_spec.hpp"
#include "tessel/core/model_spec.hpp"
#include "tessel/core/plan.hpp"
#include "tessel/core/train_spec.hpp"
#include "tessel/planner/estimate.hpp"
#include "tessel/profiles/cost_lookup.hpp"
#include "tessel/profiles/profile.hpp"

namespace tessel::planner {

// One micro-batch on the most loaded pipeline stage, before ZeRO, offload and schedule.
struct LayoutCost {
  Reject reject = Reject::none;
  // Forward and backward time per micro-batch, by kind (gemm..pp_p2p).
  std::array<double, std::size_t(TimeKind::count)> forward_s{};
  std::array<double, std::size_t(TimeKind::count)> backward_s{};
  double p2p_bytes = 0;              // one activation (or its gradient) between stages
  double p2p_intra_s = 0, p2p_inter_s = 0;  // that send inside a node, between nodes
  int stages_per_node = 1;
  // A dense model's uneven split (stage_layers.hpp): its times are the busier of two
  // stages (a full one, the short last one with the head), so not affine in the
  // calibration, and its activations scale by the stages' shares below.
  bool uneven_split = false;
  // The pipeline's other stages' work per micro-batch in units of the busiest stage's:
  // what its fill and drain (the bubble) pass through. pp - 1 when the split is even
  // (negative here stands for that); less when an uneven split's short stages are lighter.
  double other_stages_work = -1;
  // An even split (pp > 1): the head's forward and backward time per micro-batch, on
  // the last stage only (add_head_times). The bubble's other stages carry none of it, so it is taken out of what
  // they pass (pricing every stage at the last one's pace charged them all for the head).
  double head_s = 0;
  double activation_bytes_per_micro_batch = 0;  // stored by the fullest stage for one micro-batch
  // An uneven split (core/stage_layers.hpp): the blocks of the first, the second and the
  // last stage over the fullest stage's, which scale its activations (1 when even or MoE).
  double first_stage_layer_share = 1, second_stage_layer_share = 1, last_stage_layer_share = 1;
  double rematerialised_bytes = 0;   // full and selective-op recompute: one layer rebuilt in the backward, once
  double logits_bytes = 0;           // last stage, one micro-batch
  // The trainer's temporaries (trainer_temporaries.cpp) of a stage without and with the
  // head: computed with the layout, read per priced plan.
  double temporaries_bytes = 0, last_stage_temporaries_bytes = 0;
  double stage_parameters = 0;       // parameters held by one rank before ZeRO
  double layer_parameters = 0;       // one block's parameters on one rank (the ZeRO-3 gather unit)
  double layers_on_stage = 0;
  // The blocks of the stage whose micro-batch sets the pace: layers_on_stage but for an
  // uneven split whose short last stage (with the head) is the busier one. Per-micro-batch
  // data-parallel traffic (ZeRO-2/3) and fp8 weight casts lengthen that stage's passes.
  double paced_layers = 0;
  // An uneven split: the candidate stage not priced (the full middle stage, or the short
  // last one with the head), by its blocks, its time per micro-batch and the compute in
  // it that hides traffic, beside the priced stage's time per micro-batch. Its own
  // per-micro-batch ZeRO traffic and fp8 casts, which finish() prices, may make it the
  // slower one (layers 0: no such stage).
  struct OtherPace {
    double layers = 0, busy_s = 0, compute_s = 0, paced_busy_s = 0;
  };
  OtherPace other_pace;
  // MoE blocks on the busiest stage, and per such block the parameters every
  // data-parallel rank holds and the routed experts' (synced and sharded over the
  // gradient group / ep ranks that hold the same experts).
  double moe_layers_on_stage = 0, moe_layer_parameters = 0, expert_parameters = 0;
  int expert_group_ranks_per_node = 1;  // of the expert_dp group, counted from RankLayout
  // 2.5D: gradient elements all-reduced over the depth once per step, per layer bucket
  // and for the stage's other weights.
  double depth_sync_layer_elements = 0, depth_sync_rest_elements = 0;
  // fp8 training: the stage's fp8 GEMM weight elements on one rank (their fp8 copies are
  // held, and cast once per step) and its fp8 linears (each with its scaling state).
  double fp8_weight_elements = 0, fp8_linears = 0;
  // The shares of a dense block's and of an MoE block's (experts included) parameters that
  // are fp8 GEMM weights: gathered in fp8 under train.fp8_param_gather.
  double fp8_dense_share = 0, fp8_moe_share = 0;
  struct StepComm {
    double time_s = 0, bytes = 0, messages = 0;
  };
  // Partial gradients of copied vectors (1D + sequence parallel, 2D, 2.5D): the layer
  // buckets' calls of one step (of one micro-batch under ZeRO 3) and the stage's other
  // weights' call.
  StepComm partial_layer_sync, partial_rest_sync;
  // pp > 1 with tied embeddings: the first and last stage sum the gradients of their
  // copies of the token table once per step (Megatron's embedding group).
  StepComm tied_embedding_sync;
  // parallel.tp_comm_overlap: each sequence-parallel gather or scatter pipelined with a
  // GEMM, its time and its GEMM's per block (forward, backward) and how many blocks of
  // the stage run it; their time is in no forward_s/backward_s kind above until finish()
  // prices what the GEMM does not hide (cost_tp_overlap.cpp). 4 per dense block, 2 per
  // MoE block (its attention half).
  struct TpOverlapPair {
    double comm_forward_s = 0, comm_backward_s = 0, gemm_forward_s = 0, gemm_backward_s = 0;
    double blocks = 0;
  };
  std::array<TpOverlapPair, 6> tp_overlap{};
  int tp_overlap_pairs = 0;
  CommVolume comm_per_micro_batch;   // tp, sp, pp per micro-batch (fwd + bwd, incl. recompute)
  double block_tp_forward_bytes = 0;  // one transformer block's TP bytes per rank, forward
  double block_tp_forward_messages = 0;
  double forward_compute_s = 0;      // compute-only part of a micro-batch forward
  double backward_compute_s = 0;     // compute-only part of a micro-batch backward
  // The chunk packing of the first and the last stage (one stage: both the same), from
  // which offload plans are priced (core's chunk_totals.hpp): looked up by the first
  // offload plan finished from this layout (plans without offload never pack); null for
  // MoE models, whose offload is priced from fractions of the stage's states. A layout
  // cost is finished by one thread at a time.
  // chunks_between: the stages between the two ends, one packing per block count with
  // how many stages hold it (an uneven split's middle stages hold a block more than the
  // ends, core/stage_layers.hpp; an even split's carry neither embedding nor head).
  struct StageChunks {
    std::shared_ptr<const ChunkStageShape> shape;
    int blocks = 0, stages = 0;
  };
  mutable std::shared_ptr<const ChunkStageShape> chunks_first, chunks_last;
  mutable std::vector<StageChunks> chunks_between;
  mutable bool chunks_looked_up = false;
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

  // Prices later estimates under other calibration parameters (the fit's inner loop);
  // the profile's own are used until then.
  void set_calibration(const profiles::Calibration& calibration) { costs_.set_calibration(calibration); }

  // Full prediction for one layout (the world size must be gpus()).
  Estimate estimate(const ParallelConfig& parallel) const;

  // The two halves of estimate(), for the search.
  LayoutCost layout_cost(const ParallelConfig& parallel) const;
  void finish(const ParallelConfig& parallel, const LayoutCost& layout, Estimate& out) const;

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

 private:
  // layout_cost()'s parts (cost_layout.cpp): where each group sits on nodes, the ops of a
  // list priced by kind, and what they add to a layout's cost.
  struct Groups;
  struct Prices;
  Groups group_placements(const ParallelConfig& parallel) const;
  // `replayed`: the recompute mode whose replay (BlockOp::replayed_share) the prices tally.
  Prices price(const std::vector<BlockOp>& ops, const Groups& groups, Recompute replayed = Recompute::none) const;
  void add_block_times(const ParallelConfig& parallel, const Prices& block, const Prices& moe_block,
                       double moe_layers, double stage_layers, LayoutCost& c) const;
  double moe_layers_on_busiest_stage(const ParallelConfig& parallel) const;
  void add_head_times(const ParallelConfig& parallel, const BlockOpTable& table, const Groups& groups,
                      bool with_head, LayoutCost& c) const;
  void add_stage_states(const ParallelConfig& parallel, const BlockOpTable& table, const Groups& groups,
                        LayoutCost& c) const;
  // finish()'s parts (cost_finish.cpp): the busiest stage's pipeline sends per micro-batch
  // (and how many sends that is), memory, the data-parallel traffic and the optimizer.
  double pipeline_sends_s(const ParallelConfig& parallel, const LayoutCost& c, double& sends) const;
  // The chunk plan's totals of an offload plan (null otherwise): the busiest stage's by
  // device memory and by copies (cost_offload.cpp), computed once per finish().
  struct OffloadTotals {
    ChunkTotals memory, copies;
    // Every other stage's fetches over the copies stage's: the pipeline's fill and drain
    // pass their passes, fetches included.
    double other_stages_fetch_share = 0;
  };
  void add_memory(const ParallelConfig& parallel, const LayoutCost& c, int micro_batches, Estimate& out,
                  const OffloadTotals* offload) const;
  // added_per_block_s: per micro-batch, the time finish() adds to each block's passes
  // beyond the layout cost's (fp8 ZeRO-3 weight casts, tp_comm_overlap's exposed time).
  void add_data_parallel(const ParallelConfig& parallel, const LayoutCost& c, int micro_batches,
                         double added_per_block_s, Estimate& out) const;
  // An uneven split's other candidate stage, when slower than the priced one: what the step
  // pays per micro-batch, and what the bubble grows by (cost_finish.cpp).
  struct PaceExcess {
    double per_micro_batch_s = 0, bubble_s = 0;
  };
  PaceExcess other_pace_excess(const ParallelConfig& parallel, const LayoutCost& c, double paced_traffic_s,
                               double paced_exposed_s, double added_per_block_s) const;
  void add_optimizer_and_offload(const ParallelConfig& parallel, const LayoutCost& c, int micro_batches,
                                 Estimate& out, const OffloadTotals* offload) const;
  // tp_comm_overlap (cost_tp_overlap.cpp): the exposed part of each overlapped collective
  // and its GEMM's slowdown, added to the micro-batch's forward and backward and the step.
  void add_tp_overlap(const ParallelConfig& parallel, const LayoutCost& c, int micro_batches, double& forward_s,
                      double& backward_s, Estimate& out) const;
  // Offload from the chunk plan (cost_offload.cpp): the stage shapes' packings, cached
  // per (pipeline, tensor grid, gradient group, stage) since every micro-batch size,
  // recompute mode, ZeRO stage and offload variant shares them; and the totals of the
  // stage whose device memory is the larger.
  struct ChunkShapeCache;
  void add_chunk_shapes(const ParallelConfig& parallel, const LayoutCost& c) const;
  OffloadTotals offload_totals(const ParallelConfig& parallel, const LayoutCost& c, int micro_batches) const;
  static void add_chunked_memory(const ChunkTotals& totals, Estimate& out);
  void add_chunked_optimizer(const ParallelConfig& parallel, const LayoutCost& c, const OffloadTotals& totals,
                             int micro_batches, Estimate& out) const;

  ModelSpec model_;
  TrainSpec train_;
  ClusterSpec cluster_;
  int nodes_;
  int gpus_per_node_;
  profiles::CostLookup costs_;
  int seq_;
  bool overlap_ = true;
  double element_bytes_;
  bool cpu_ranks_ = false;  // the device is a CPU: MPI's reduction temporaries are in its memory
  double param_bytes_, grad_bytes_, optimizer_bytes_, optimizer_traffic_bytes_;
  double forward_gemm_flops_per_token_ = 0;
  double forward_attention_flops_per_token_ = 0;
  double model_flops_per_step_ = 0;
  // The four linears of a block as (in, out) features.
  std::array<std::pair<double, double>, 4> linears_{};
  std::shared_ptr<ChunkShapeCache> chunk_shapes_;
};

}  // namespace tessel::planner
