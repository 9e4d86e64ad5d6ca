// The analytic cost model against the published formulas it implements: training
// FLOPs, model-state and activation memory (Korthikanti et al. 2022), communication
// scaling per TP mode (MISSION.md complexity table), and the pipeline bubble.
#include <gtest/gtest.h>

#include <tuple>

#include "tessel/core/chunk_plan.hpp"

#include <cmath>

#include "tessel/core/block_ops.hpp"
#include "tessel/core/op_names.hpp"
#include "tessel/planner/cost_model.hpp"
#include "tessel/profiles/profile.hpp"

using namespace tessel;
using namespace tessel::planner;

namespace {
CostModel cost_model(const ModelSpec& model, const std::string& cluster, int nodes, int global_batch,
                     Precision precision = Precision::bf16, Kernels kernels = Kernels::unfused) {
  TrainSpec train;
  train.global_batch = global_batch;
  train.precision = precision;
  train.kernels = kernels;
  const ClusterSpec spec = resolve_cluster(cluster);
  return CostModel(model, train, spec, nodes, spec.gpus_per_node, profiles::shipped_profile(spec.device));
}

CostModel model_on(const std::string& model, const std::string& cluster, int nodes, int global_batch,
                   Precision precision = Precision::bf16) {
  return cost_model(resolve_model(model), cluster, nodes, global_batch, precision);
}

CostModel fused_model_on(const std::string& model, const std::string& cluster, int nodes, int global_batch) {
  return cost_model(resolve_model(model), cluster, nodes, global_batch, Precision::bf16, Kernels::fused);
}

ParallelConfig layout(int dp, int pp, int tp, int micro_batch = 1) {
  ParallelConfig p;
  p.dp = dp;
  p.pp = pp;
  p.tp = tp;
  p.micro_batch = micro_batch;
  return p;
}

// A model whose dimensions divide every grid used below.
CostModel grid_friendly_model() {
  ModelSpec m;
  m.name = "grid";
  m.layers = 8;
  m.hidden = 1024;
  m.heads = 16;
  m.kv_heads = 16;
  m.ffn_hidden = 4096;
  m.vocab = 32768;
  m.seq_len = 1024;
  return cost_model(m, "dgx-h100", 8, 64);
}
}  // namespace

TEST(Flops, TrainingFlopsAre6NTPlusAttentionWithinOnePercent) {
  for (const char* name : {"gpt2-124m", "gpt2-350m", "gpt2-1.5b", "gpt3-6.7b", "gpt3-175b"}) {
    const CostModel model = model_on(name, "dgx-a100", 1, 64);
    const ModelSpec& m = model.model();
    const double tokens = 64.0 * m.seq_len;
    // 6 FLOPs per parameter per token, plus attention scores and context:
    // 12 * layers * hidden * seq per token (PaLM, Chowdhery et al. 2022, appendix B).
    const double expected = 6.0 * double(m.parameter_count()) * tokens + 12.0 * m.layers * m.hidden * m.seq_len * tokens;
    EXPECT_NEAR(model.model_flops_per_step() / expected, 1.0, 0.01) << name;
  }
}

// Megatron-LM's theoretical memory report counts 18 bytes per parameter without the
// distributed optimizer: bf16 weights 2, fp32 main gradients 4, fp32 master weights and
// two moments 12. fp16 keeps fp16 gradients (16), fp32 training fp32 everything (16).
TEST(Memory, PlainDataParallelMixedAdamWHoldsTheEnginesBytesPerParameter) {
  for (auto [precision, bytes] : {std::pair{Precision::bf16, 18.0}, {Precision::fp16, 16.0}, {Precision::fp32, 16.0}}) {
    const CostModel model = model_on("gpt2-350m", "dgx-a100", 1, 64, precision);
    EXPECT_EQ(model.train().effective_gradient_precision(), default_gradient_precision(precision));
    const Estimate e = model.estimate(layout(8, 1, 1, 1));
    ASSERT_EQ(e.reject, Reject::none);
    const double params = double(model.model().parameter_count());
    EXPECT_DOUBLE_EQ(e.memory.parameters_bytes + e.memory.gradients_bytes + e.memory.optimizer_bytes, bytes * params)
        << to_string(precision);
    EXPECT_GT(e.memory.activations_bytes, 0);
  }
}

TEST(Memory, ZeroStagesShardStatesOverTheDataParallelGroup) {
  const CostModel model = model_on("gpt2-350m", "dgx-a100", 1, 64);
  const double params = double(model.model().parameter_count());
  ParallelConfig p = layout(8, 1, 1, 1);
  // bf16 weights, fp32 gradients (the default), fp32 master weights and moments.
  const double expected[4][3] = {{2, 4, 12}, {2, 4, 12.0 / 8}, {2, 4.0 / 8, 12.0 / 8}, {2.0 / 8, 4.0 / 8, 12.0 / 8}};
  // ZeRO-3 gathers each layer's weights whole before use: the layer in use and the one
  // prefetched sit on the device next to the shard.
  const double gather_buffer = 2.0 * double(model.model().layer_parameters()) * 2;
  // ZeRO-2 and 3 reduce-scatter each layer's fp32 gradient every micro-batch: one layer's
  // is whole before its reduce-scatter, and the embedding and head (synced once per
  // step) keep theirs whole beside their shard until the step's.
  const double rest = params - double(model.model().layers) * double(model.model().layer_parameters());
  const double transient_gradients = (double(model.model().layer_parameters()) + rest) * 4;
  for (int zero = 0; zero <= 3; ++zero) {
    p.zero = zero;
    const Estimate e = model.estimate(p);
    EXPECT_DOUBLE_EQ(e.memory.parameters_bytes, expected[zero][0] * params + (zero == 3 ? gather_buffer : 0)) << zero;
    EXPECT_NEAR(e.memory.gradients_bytes, expected[zero][1] * params + (zero >= 2 ? transient_gradients : 0),
                1e-6 * params)
        << zero;
    EXPECT_DOUBLE_EQ(e.memory.optimizer_bytes, expected[zero][2] * params) << zero;
  }
  p.zero = 0;
  p.offload = OffloadMode::optimizer;
  // Offload: the chunk plan's placement (core's chunk_plan.hpp), its chunks padded by at
  // most a few percent over the parameters.
  Estimate offloaded = model.estimate(p);
  EXPECT_DOUBLE_EQ(offloaded.memory.optimizer_bytes, 0);
  const ChunkPlan optimizer_plan = chunk_plan(model.model(), model.train(), p, 0);
  EXPECT_DOUBLE_EQ(offloaded.memory.host_bytes, optimizer_plan.host_state_bytes);
  // fp32 master weights, two moments and the fp32 gradient the host optimizer reads.
  EXPECT_GE(offloaded.memory.host_bytes, 16 * params);
  EXPECT_LE(offloaded.memory.host_bytes, 1.05 * 16 * params);
  EXPECT_GT(offloaded.time(TimeKind::offload), 0);
  p.offload = OffloadMode::chunked;
  p.offload_device_fraction = 0.25;
  Estimate chunked = model.estimate(p);
  const ChunkPlan chunked_plan = chunk_plan(model.model(), model.train(), p, 0);
  EXPECT_DOUBLE_EQ(chunked.memory.parameters_bytes + chunked.memory.gradients_bytes + chunked.memory.optimizer_bytes,
                   chunked_plan.device_total_bytes());
  EXPECT_DOUBLE_EQ(chunked.memory.host_bytes, chunked_plan.host_state_bytes);
  // The last three quarters of the chunks keep their 18 bytes of weights, optimizer
  // states and fp32 gradient per element on the host (the first chunk, the token table,
  // stays).
  double host_elements = 0;
  for (const Chunk& c : chunked_plan.chunks) host_elements += c.host_resident ? double(c.capacity_elements) : 0.0;
  EXPECT_EQ(chunked_plan.resident_chunks, int(std::ceil(0.25 * double(chunked_plan.chunks.size()))));
  EXPECT_DOUBLE_EQ(chunked.memory.host_bytes, 18 * host_elements);
  EXPECT_DOUBLE_EQ(chunked.comm.offload_bytes, chunked_plan.host_to_device_bytes + chunked_plan.device_to_host_bytes);
}

// An uneven split (core/stage_layers.hpp) leaves the two end stages a block short: chunked
// offload is priced on the stage that holds the most, a middle one here.
TEST(Memory, ChunkedOffloadOfAnUnevenSplitIsPricedOnTheFullestStage) {
  Plan plan = Plan::from_json(Json::parse(R"({"model": {"name": "uniform", "layers": 10, "hidden": 2048, "heads": 16,
      "vocab": 512, "seq_len": 512}, "cluster": "dgx-a100", "nodes": 1, "train": {"global_batch": 64},
      "parallel": {"dp": 2, "pp": 4, "micro_batch": 1, "offload": {"mode": "chunked", "device_fraction": 0.5}}})"),
                              "");
  plan.validate();
  const CostModel model(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(),
                        profiles::shipped_profile("A100-SXM-80GB"));
  const Estimate e = model.estimate(plan.parallel);
  const int micro_batches = plan.train.global_batch / (plan.parallel.dp * plan.parallel.micro_batch);
  double most = 0;
  for (int stage = 0; stage < plan.parallel.pp; ++stage) {
    const ChunkTotals totals =
        chunk_totals(chunk_stage_shape(plan.model, plan.parallel, stage), plan.train, plan.parallel, micro_batches);
    most = std::max(most, totals.device_total_bytes());
  }
  const ChunkTotals first =
      chunk_totals(chunk_stage_shape(plan.model, plan.parallel, 0), plan.train, plan.parallel, micro_batches);
  ASSERT_GT(most, first.device_total_bytes()) << "a middle stage must hold more than the first for the test to mean anything";
  EXPECT_DOUBLE_EQ(e.memory.parameters_bytes + e.memory.gradients_bytes + e.memory.optimizer_bytes, most);
}

TEST(Memory, ActivationsPerLayerFollowKorthikanti2022) {
  const CostModel model = model_on("gpt3-175b", "dgx-a100", 8, 64);
  const ModelSpec& m = model.model();
  const double s = m.seq_len, h = m.hidden, a = m.heads;
  const int b = 2;
  const double sbh = s * b * h;
  ParallelConfig p = layout(1, 1, 1, b);
  EXPECT_DOUBLE_EQ(model.activation_bytes_per_layer(p), sbh * (34 + 5 * a * s / h));
  for (int t : {2, 4, 8}) {
    p = layout(1, 1, t, b);
    EXPECT_NEAR(model.activation_bytes_per_layer(p), sbh * (10 + 24.0 / t + 5 * a * s / (h * t)), 1e-3) << t;
    p.tp_sequence_parallel = true;
    EXPECT_NEAR(model.activation_bytes_per_layer(p), sbh / t * (34 + 5 * a * s / h), 1e-3) << t;
    p.recompute = Recompute::selective;
    EXPECT_NEAR(model.activation_bytes_per_layer(p), sbh * 34 / t, 1e-3) << t;
    p.tp_sequence_parallel = false;
    EXPECT_NEAR(model.activation_bytes_per_layer(p), sbh * (10 + 24.0 / t), 1e-3) << t;
    p.recompute = Recompute::full;
    EXPECT_NEAR(model.activation_bytes_per_layer(p), 2 * sbh, 1e-3) << t;
  }
  // fp32 activations take twice the bytes of the 16-bit formula.
  const CostModel fp32 = model_on("gpt3-175b", "dgx-a100", 8, 64, Precision::fp32);
  EXPECT_DOUBLE_EQ(fp32.activation_bytes_per_layer(layout(1, 1, 1, b)), 2 * sbh * (34 + 5 * a * s / h));
}

// Fused (flash-style) attention never stores the scores: the 5as/h term is gone (one
// fp32 log-sum-exp per row and head is kept instead), with recompute none it equals
// selective recompute, and the Program has no softmax op.
TEST(Memory, FusedKernelsKeepNoAttentionScores) {
  const CostModel fused = fused_model_on("gpt3-175b", "dgx-a100", 8, 64);
  const CostModel unfused = model_on("gpt3-175b", "dgx-a100", 8, 64);
  const double sbh = double(fused.model().seq_len) * 2 * fused.model().hidden;
  const double statistics = 4.0 * fused.model().heads * fused.model().seq_len * 2;
  ParallelConfig p = layout(1, 1, 1, 2);
  EXPECT_DOUBLE_EQ(fused.activation_bytes_per_layer(p), sbh * 34 + statistics);
  EXPECT_LT(fused.activation_bytes_per_layer(p), unfused.activation_bytes_per_layer(p));
  p.recompute = Recompute::selective;
  EXPECT_DOUBLE_EQ(fused.activation_bytes_per_layer(p), sbh * 34 + statistics);
  int softmax_ops = 0, recomputed = 0;
  const tessel::BlockOpTable table = block_op_table(fused.model(), 2048, layout(1, 1, 1, 2), Precision::bf16, Kernels::fused);
  for (const tessel::BlockOp& op : table.block) {
    softmax_ops += op.name == ops::attn_softmax;
    recomputed += op.selective_recompute;
  }
  EXPECT_EQ(softmax_ops, 0);
  EXPECT_EQ(recomputed, 0);
}

// Fused attention's time as the kernel runs: one launch over every head and sequence
// of the micro-batch, read on the GEMM curve at its whole work (materialised attention at
// one head's product), and a backward that recomputes the scores: 2.5x the forward
// (five products against two) where materialised attention's is 2x.
TEST(Time, FusedAttentionIsOneKernelWhoseBackwardRecomputesTheScores) {
  const CostModel fused = fused_model_on("gpt3-6.7b", "dgx-a100", 1, 64);
  const CostModel unfused = model_on("gpt3-6.7b", "dgx-a100", 1, 64);
  const ParallelConfig p = layout(8, 1, 1, 2);
  auto core_of = [&](Kernels kernels) {
    const tessel::BlockOpTable table = block_op_table(fused.model(), 2048, p, Precision::bf16, kernels);
    for (const tessel::BlockOp& op : table.block) {
      if (op.kind == OpKind::attention) return op;
    }
    return tessel::BlockOp{};
  };
  const tessel::BlockOp fused_core = core_of(Kernels::fused), unfused_core = core_of(Kernels::unfused);
  EXPECT_EQ(fused_core.flops, unfused_core.flops) << "the same products, counted the same way";
  EXPECT_EQ(fused_core.gemm_flops, fused_core.flops);
  EXPECT_EQ(unfused_core.gemm_flops, 2.0 * 2048 * 2048 * fused.model().head_dim());
  EXPECT_EQ(fused_core.backward, 2.5);
  EXPECT_EQ(unfused_core.backward, 2.0);
  const LayoutCost f = fused.layout_cost(p), u = unfused.layout_cost(p);
  const std::size_t attention = std::size_t(TimeKind::attention);
  EXPECT_NEAR(f.dense.backward_s[attention], 2.5 * f.dense.forward_s[attention], 1e-12 * f.dense.forward_s[attention]);
  EXPECT_NEAR(u.dense.backward_s[attention], 2.0 * u.dense.forward_s[attention], 1e-12 * u.dense.forward_s[attention]);
  EXPECT_LT(f.dense.forward_s[attention], u.dense.forward_s[attention]) << "one large kernel runs nearer the curve's top";
}

// The search prices a layout's interleaved variants from its one-chunk layout cost
// (search.cpp), so an interleaved split must cost what its one-chunk split costs per
// stage: stage totals are the same whatever the schedule (stage_layers.hpp), also where
// the chunks are uneven (30 layers over pp 2 x 4 chunks: 3 + 4 + 4 + 4 and 4 + 4 + 4 + 3;
// over pp 4: 31 layers, 7 + 8 + 8 + 8 as one chunk each or 3 + 4 ... as two).
TEST(Time, AnInterleavedSplitCostsWhatItsOneChunkSplitCostsPerStage) {
  for (const auto& [layers, pp, chunks] : {std::tuple{30, 2, 4}, std::tuple{31, 4, 2}, std::tuple{126, 8, 2}}) {
    ModelSpec model = resolve_model("gpt3-6.7b");
    model.layers = layers;
    const CostModel cost = cost_model(model, "dgx-a100", 2, 64);
    ParallelConfig one_chunk = layout(16 / pp, pp, 1);
    ParallelConfig interleaved = one_chunk;
    interleaved.schedule = Schedule::interleaved;
    interleaved.virtual_stages = chunks;
    const LayoutCost a = cost.layout_cost(one_chunk), b = cost.layout_cost(interleaved);
    ASSERT_EQ(a.reject, Reject::none) << layers;
    ASSERT_EQ(b.reject, Reject::none) << layers;
    for (auto pass : {&LayoutCost::dense, &LayoutCost::moe, &LayoutCost::head, &LayoutCost::embedding}) {
      for (std::size_t k = 0; k < (a.*pass).forward_s.size(); ++k) {
        EXPECT_EQ((a.*pass).forward_s[k], (b.*pass).forward_s[k]) << layers << " layers, kind " << k;
        EXPECT_EQ((a.*pass).backward_s[k], (b.*pass).backward_s[k]) << layers << " layers, kind " << k;
      }
    }
    EXPECT_EQ(a.last_stage_layer_share, b.last_stage_layer_share) << layers;
  }
}

// Selective recompute replays what the Program replays (BlockOp::selective_recompute):
// materialised attention's core and softmax; a fused kernel stores no scores, so there
// is nothing to replay and selective costs what no recompute costs.
TEST(Time, SelectiveRecomputeReplaysOnlyTheOpsTheProgramReplays) {
  const CostModel fused = fused_model_on("gpt3-6.7b", "dgx-a100", 1, 64);
  const CostModel unfused = model_on("gpt3-6.7b", "dgx-a100", 1, 64);
  ParallelConfig p = layout(8, 1, 1, 2);
  p.recompute = Recompute::selective;
  const std::size_t recompute = std::size_t(TimeKind::recompute), attention = std::size_t(TimeKind::attention);
  EXPECT_EQ(fused.layout_cost(p).dense.backward_s[recompute], 0.0);
  const LayoutCost u = unfused.layout_cost(p);
  EXPECT_GT(u.dense.backward_s[recompute], u.dense.forward_s[attention]) << "the core and its softmax, again";
  ParallelConfig none = p;
  none.recompute = Recompute::none;
  EXPECT_DOUBLE_EQ(fused.estimate(p).step_time_s, fused.estimate(none).step_time_s);
}

// ZeRO-3 gathers run one layer ahead of the compute: however long the compute, the first
// layer's forward gather and the last reduce-scatter of each micro-batch have nothing to
// hide behind (2/3 of one layer's traffic: one of its two gathers and its reduce-scatter).
TEST(Time, Zero3LeavesThePipelinesEndsOfItsGathersExposed) {
  CostModel model = model_on("gpt3-6.7b", "dgx-a100", 1, 64);
  ParallelConfig p = layout(8, 1, 1, 1);
  p.zero = 3;
  model.set_overlap(false);
  const Estimate serial = model.estimate(p);
  model.set_overlap(true);
  const Estimate overlapped = model.estimate(p);
  const double layers = model.model().layers;
  // The rest of the stage (embedding, head) syncs once per step in both; the layers' part
  // is what the overlap hides.
  ASSERT_GT(serial.time(TimeKind::dp_comm), 0);
  EXPECT_GT(overlapped.time(TimeKind::dp_comm), 0.5 * serial.time(TimeKind::dp_comm) / layers);
  EXPECT_LT(overlapped.time(TimeKind::dp_comm), 2.0 * serial.time(TimeKind::dp_comm) / layers);
}

TEST(Memory, GridModesSplitActivationsAsTheComplexityTableSays) {
  const CostModel model = grid_friendly_model();
  auto activations = [&](TpMode mode, int tp, int depth = 1) {
    ParallelConfig p = layout(1, 1, tp, 1);
    p.tp_mode = mode;
    p.tp_depth = depth;
    return model.activation_bytes_per_layer(p);
  };
  const double one = activations(TpMode::d1, 1);
  EXPECT_DOUBLE_EQ(activations(TpMode::d2, 4), one / 4);         // O(1/P)
  EXPECT_DOUBLE_EQ(activations(TpMode::d2, 16), one / 16);
  EXPECT_DOUBLE_EQ(activations(TpMode::d2_5, 8, 2), one / 8);    // O(1/P)
  EXPECT_DOUBLE_EQ(activations(TpMode::d3, 8), one / 4);         // O(1/P^(2/3))
  EXPECT_DOUBLE_EQ(activations(TpMode::d3, 64), one / 16);
  // 1D keeps the replicated part (10 of the 34 + 5as/h per s*b*h): O(1).
  const double score_term = 5.0 * 16 * 1024 / 1024;
  EXPECT_GT(activations(TpMode::d1, 8), one * 10 / (34 + score_term));
  EXPECT_GT(activations(TpMode::d1, 64), one * 10 / (34 + score_term));
}

// Per-rank tensor-parallel bytes of one block's forward when P grows, against the
// complexity table: 1D O(1), 2D O(1/sqrt P), 2.5D O(1/sqrt(dP)), 3D O(1/P^(2/3)).
// Ring and gather collectives move (n-1)/n of their buffer, so where they are used the
// expected ratio carries that factor too.
TEST(Communication, OneDimensionalBytesStayConstantAsPGrows) {
  const CostModel model = grid_friendly_model();
  const double p4 = model.layout_cost(layout(1, 1, 4)).block_tp_forward_bytes;
  const double p8 = model.layout_cost(layout(1, 1, 8)).block_tp_forward_bytes;
  ASSERT_GT(p4, 0);
  EXPECT_NEAR(p8 / p4, (2.0 * 7 / 8) / (2.0 * 3 / 4), 1e-12);
}

TEST(Communication, TwoDimensionalBytesFallAsOneOverSqrtP) {
  const CostModel model = grid_friendly_model();
  ParallelConfig p = layout(1, 1, 4);
  p.tp_mode = TpMode::d2;
  const double p4 = model.layout_cost(p).block_tp_forward_bytes;
  p.tp = 16;
  const double p16 = model.layout_cost(p).block_tp_forward_bytes;
  ASSERT_GT(p4, 0);
  // The SUMMA broadcasts fall exactly as 1/sqrt(P); the layer norm's row statistics (8
  // bytes per token row, all-reduced over the grid row) are the 1e-4 left.
  EXPECT_NEAR(p16 / p4, std::sqrt(4.0 / 16.0), 1e-3);
}

TEST(Communication, TwoAndAHalfDimensionalBytesFallAsOneOverSqrtDP) {
  const CostModel model = grid_friendly_model();
  ParallelConfig p = layout(1, 1, 8);
  p.tp_mode = TpMode::d2_5;
  p.tp_depth = 2;
  const double p8 = model.layout_cost(p).block_tp_forward_bytes;
  p.tp = 32;  // q 2 -> 4 at depth 2
  const double p32 = model.layout_cost(p).block_tp_forward_bytes;
  ASSERT_GT(p8, 0);
  // As in 2D: the layer norm's row statistics are the 1e-4 left.
  EXPECT_NEAR(p32 / p8, std::sqrt(2.0 * 8 / (2.0 * 32)), 1e-3);
}

TEST(Communication, ThreeDimensionalBytesFallAsOneOverPToTheTwoThirds) {
  const CostModel model = grid_friendly_model();
  ParallelConfig p = layout(1, 1, 8);
  p.tp_mode = TpMode::d3;
  const double p8 = model.layout_cost(p).block_tp_forward_bytes;
  p.tp = 64;
  const double p64 = model.layout_cost(p).block_tp_forward_bytes;
  ASSERT_GT(p8, 0);
  const double gather_factor = (3.0 / 4) / (1.0 / 2);  // (q-1)/q at q = 4 over q = 2
  EXPECT_NEAR(p64 / p8, std::pow(8.0 / 64.0, 2.0 / 3.0) * gather_factor, 1e-12);
}

// The fill and drain pass pp - 1 stages without the head: (pp - 1) x (the last stage's
// micro-batch less its head) and what the other stages do that it does not.
TEST(Pipeline, BubbleIsPMinusOneStagesWithoutTheHead) {
  const CostModel model = model_on("gpt2-350m", "dgx-a100", 1, 64);
  for (Schedule schedule : {Schedule::gpipe, Schedule::one_f_one_b}) {
    ParallelConfig p = layout(2, 4, 1, 4);
    p.schedule = schedule;
    const Estimate e = model.estimate(p);
    ASSERT_EQ(e.reject, Reject::none);
    const LayoutCost cost = model.layout_cost(p);
    const double head_s = cost.head.forward_total_s() + cost.head.backward_total_s();
    ASSERT_GT(head_s, 0);
    const double m = e.micro_batches, pp = 4;
    double stages = 0;
    for (TimeKind kind : {TimeKind::gemm, TimeKind::attention, TimeKind::elementwise, TimeKind::recompute,
                          TimeKind::tp_comm, TimeKind::sp_comm, TimeKind::pp_p2p}) {
      stages += e.time(kind);
    }
    // The fill and drain pass each other stage's own work: the first stage's embedding,
    // and the middle stages' second send per micro-batch (the last stage sends one).
    const double embedding_s = cost.embedding.forward_total_s() + cost.embedding.backward_total_s();
    EXPECT_NEAR(e.time(TimeKind::pp_bubble), (pp - 1) * (stages / m - head_s) + embedding_s + (pp - 2) * cost.p2p_intra_s,
                1e-12 * stages);
  }
  ParallelConfig interleaved = layout(2, 4, 1, 4);
  interleaved.schedule = Schedule::interleaved;
  interleaved.virtual_stages = 2;
  ParallelConfig plain = layout(2, 4, 1, 4);
  EXPECT_LT(model.estimate(interleaved).time(TimeKind::pp_bubble), model.estimate(plain).time(TimeKind::pp_bubble));
  // 1F1B holds at most pp micro-batches of activations, GPipe all of them.
  ParallelConfig gpipe = plain;
  gpipe.schedule = Schedule::gpipe;
  EXPECT_GT(model.estimate(gpipe).memory.activations_bytes, model.estimate(plain).memory.activations_bytes);
}

TEST(Estimate, PartsAddUpToTheStepAndMfuFollowsFromIt) {
  const CostModel model = model_on("gpt3-13b", "dgx-h100", 4, 256);
  ParallelConfig p = layout(2, 2, 8, 1);
  p.zero = 1;
  p.recompute = Recompute::selective;
  const Estimate e = model.estimate(p);
  ASSERT_EQ(e.reject, Reject::none);
  double sum = 0;
  for (double part : e.time_s) sum += part;
  EXPECT_NEAR(sum, e.step_time_s, 1e-12 * e.step_time_s);
  EXPECT_NEAR(e.mfu, model.model_flops_per_step() / (e.step_time_s * 32 * 989.4e12), 1e-12);
  EXPECT_NEAR(e.tokens_per_s, 256.0 * 2048 / e.step_time_s, 1e-6);
  EXPECT_GT(e.mfu, 0.05);
  EXPECT_LT(e.mfu, 0.9);
}

TEST(Estimate, ChangesWhenAndOnlyWhenTheCostDataChanges) {
  TrainSpec train;
  train.global_batch = 64;
  const ModelSpec model = resolve_model("gpt2-1.5b");
  const ClusterSpec cluster = resolve_cluster("dgx-h100");
  profiles::Profile profile = profiles::shipped_profile("H100-SXM");
  const ParallelConfig p = layout(8, 1, 1, 2);
  const double base = CostModel(model, train, cluster, 1, 8, profile).estimate(p).step_time_s;
  EXPECT_EQ(CostModel(model, train, cluster, 1, 8, profile).estimate(p).step_time_s, base);
  // A sample of another precision changes nothing the bf16 plan reads.
  profiles::Profile unrelated = profile;
  unrelated.kernels.push_back(profiles::KernelSample::gemm("H100-SXM", "fp32", 4096, 4096, 4096));
  unrelated.kernels.back().seconds = 1.0;
  EXPECT_EQ(CostModel(model, train, cluster, 1, 8, unrelated).estimate(p).step_time_s, base);
  // Faster GEMM samples make the step faster.
  for (auto& sample : profile.kernels) sample.seconds /= 2;
  EXPECT_LT(CostModel(model, train, cluster, 1, 8, profile).estimate(p).step_time_s, base);
  ClusterSpec slow = cluster;
  slow.intra_node.bandwidth_bytes_per_s /= 10;
  EXPECT_GT(CostModel(model, train, slow, 1, 8, profiles::shipped_profile("H100-SXM")).estimate(p).step_time_s, base);
}
