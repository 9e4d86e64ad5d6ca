// The chunk manager of offload plans on one rank (the MPI layouts are offload_check.cpp):
// the budgeted pool, the tracer, the host AdamW against the CPU reference; offload runs
// equal runs without offload bit for bit, move the chunk plan's bytes and stay in budget
// at every op; a budget too small for any placement is refused before the run with the
// smallest that works; checkpoints with chunks on the host resume bit-exactly.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "tessel/core/chunk_plan.hpp"
#include "tessel/core/chunk_totals.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/program.hpp"
#include "tessel/core/subprocess.hpp"
#include "tessel/executor/comm/single_rank_communicator.hpp"
#include "tessel/executor/device_pool.hpp"
#include "tessel/executor/host_optimizer.hpp"
#include "tessel/executor/memory_tracer.hpp"
#include "tessel/executor/trainer.hpp"
#include "tessel/planner/cost_model.hpp"
#include "tessel/planner/stage_memory.hpp"
#include "protected_memory_backend.hpp"

using namespace tessel;
using namespace tessel::executor;
namespace fs = std::filesystem;

namespace {

Plan offload_plan(const std::string& offload, int layers = 4) {
  return Plan::from_json(Json::parse(fmt::format(R"({{"model": {{"name": "small", "layers": {}, "hidden": 32, "heads": 4,
      "vocab": 256, "seq_len": 16}}, "cluster": "local-cpu", "train": {{"global_batch": 8, "precision": "fp32",
      "optimizer": "adamw"}}, "parallel": {{"dp": 1, "micro_batch": 4, "offload": {}}}}})",
                                                 layers, offload)),
                         "");
}

TrainerOptions test_options(std::size_t budget_bytes) {
  TrainerOptions o;
  o.seed = 7;
  o.weight_decay = 0.01f;
  o.clip_grad_norm = 0.5f;  // the host step reads the clipping factor
  o.device_memory_bytes = budget_bytes;
  return o;
}

struct RunResult {
  std::vector<float> losses, weights;
  OffloadStats offload;
  std::vector<double> up_bytes, down_bytes;  // per step
};

RunResult train(const Plan& plan, std::size_t budget_bytes, int steps = 5,
                kernels::Backend& backend = kernels::cpu_backend()) {
  SingleRankCommunicator world(backend);
  ProcessGrid grid(plan.parallel, world);
  Trainer trainer(plan, grid, DataLoader(synthetic_corpus(1 << 14, 3), 8, 16), test_options(budget_bytes), backend);
  RunResult run;
  for (int s = 0; s < steps; ++s) {
    run.losses.push_back(trainer.step().loss);
    run.up_bytes.push_back(trainer.offload_stats().host_to_device_bytes);
    run.down_bytes.push_back(trainer.offload_stats().device_to_host_bytes);
  }
  run.weights = trainer.whole_parameters();
  run.offload = trainer.offload_stats();
  return run;
}

constexpr std::size_t kRoomyBudget = std::size_t(1) << 30;

// The Program's copies of one step on rank 0, each way: the sum of its copy ops' bytes
// (the used elements of each chunk copied; the executor moves tensors, never a chunk's
// empty tail).
std::pair<double, double> planned_bytes(const Plan& plan) {
  const Program program = Program::lower(plan);
  double up = 0, down = 0;
  for (const ProgramOp& op : program.rank_program(0).ops) {
    if (op.stream != Stream::copy) continue;
    (op.id.ends_with("d2h") ? down : up) += program.op_bytes_of_rank(0, op);
  }
  return {up, down};
}

}  // namespace

TEST(DevicePool, RefusesAnAllocationOrAnOpBeyondTheBudgetNamingTheOp) {
  DevicePool pool(kernels::cpu_backend(), 1000);
  pool.enter_op("mb0/L1/fwd/mlp.fc1", 200);
  void* a = pool.allocate(600);
  EXPECT_EQ(pool.model_bytes(), 600u);
  EXPECT_EQ(pool.peak_bytes(), 800u);
  try {
    pool.allocate(201);
    FAIL() << "an allocation past the budget was accepted";
  } catch (const DeviceBudgetExceeded& e) {
    EXPECT_EQ(e.op(), "mb0/L1/fwd/mlp.fc1");
    EXPECT_EQ(e.needed_bytes(), 1001u);
    EXPECT_NE(std::string(e.what()).find("mb0/L1/fwd/mlp.fc1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(pool.enter_op("mb0/L2/fwd/attn.qkv", 401), DeviceBudgetExceeded);
  pool.enter_op("mb0/L2/fwd/attn.qkv", 400);
  EXPECT_EQ(pool.peak_bytes(), 1000u);
  pool.deallocate(a);
  EXPECT_EQ(pool.model_bytes(), 0u);
}

TEST(MemoryTracer, KeepsEachOpsMostAndTheRoomBetweenOps) {
  MemoryTracer tracer;
  tracer.record("a", 100);
  tracer.record("b", 300);
  tracer.record("a", 150);
  tracer.record("c", 50);
  tracer.finish();
  tracer.record("c", 5000);  // after the warm-up: ignored
  ASSERT_EQ(tracer.samples().size(), 3u);
  EXPECT_EQ(tracer.non_model_at("a"), 150u);
  EXPECT_EQ(tracer.non_model_at("c"), 50u);
  EXPECT_EQ(tracer.non_model_at("unseen"), 300u);  // the peak: the safe side
  EXPECT_EQ(tracer.room_at("b", 1000), 700u);
  EXPECT_EQ(tracer.least_room_between("a", "c", 1000), 700u);  // a and b
  EXPECT_EQ(tracer.least_room_between("c", "c", 1000), 1000u);
  EXPECT_EQ(tracer.room_at("b", 200), 0u);
}

TEST(HostOptimizer, AdamWOverBlocksAndThreadsIsTheCpuReferenceBitForBit) {
  const std::int64_t n = 3 * kHostOptimizerBlockElements + 12345;
  std::mt19937 random(3);
  std::normal_distribution<float> normal;
  const std::size_t count = std::size_t(n);
  std::vector<float> param(count), grad(count), m(count), v(count);
  for (auto* x : {&param, &grad, &m, &v}) {
    for (float& e : *x) e = normal(random);
  }
  for (float& e : v) e = std::abs(e);
  kernels::AdamWParams p;
  p.lr = 1e-3f, p.weight_decay = 0.1f, p.step = 3;
  for (const float scale : {1.0f, 0.37f}) {
    std::vector<float> param_a = param, m_a = m, v_a = v, param_b = param, m_b = m, v_b = v;
    const float* scale_pointer = scale == 1.0f ? nullptr : &scale;
    kernels::cpu_backend().adamw_step(Stream::compute, param_a.data(), grad.data(), m_a.data(), v_a.data(), n, p,
                                      scale_pointer);
    host_adamw_step(param_b.data(), grad.data(), m_b.data(), v_b.data(), n, p, scale_pointer);
    EXPECT_EQ(param_a, param_b);
    EXPECT_EQ(m_a, m_b);
    EXPECT_EQ(v_a, v_b);
  }
}

// Pieces of one reference call, at other addresses (the host chunks' layout), give the
// bits of that call: Eigen's vector square root is not its scalar one, so each element
// must run where the reference ran it.
TEST(HostOptimizer, PiecesOfACallGiveTheBitsOfTheCall) {
  const std::size_t n = 1000;
  std::mt19937 random(5);
  std::normal_distribution<float> normal;
  std::vector<float> grad(n), param(n), m(n), v(n);
  for (std::size_t i = 0; i < n; ++i) {
    grad[i] = normal(random) * std::pow(10.0f, -float(i % 9)), param[i] = normal(random) * 0.02f;
    m[i] = grad[i] * 0.1f, v[i] = grad[i] * grad[i] * 1e-3f;
  }
  kernels::AdamWParams p;
  p.lr = 1e-3f, p.weight_decay = 0.01f, p.step = 2;
  for (const std::size_t shift : {0u, 3u, 7u}) {  // the reference's weights `shift` floats past a 64-byte boundary
    std::vector<float> reference_param(n + 32, 0.0f), reference_m = m, reference_v = v;
    float* base = reference_param.data();
    while (reinterpret_cast<std::uintptr_t>(base) % 64 != 0) ++base;  // up to 15 floats, + shift: within the 32 spare
    base += shift;
    std::copy(param.begin(), param.end(), base);
    kernels::cpu_backend().adamw_step(Stream::compute, base, grad.data(), reference_m.data(), reference_v.data(),
                                      std::int64_t(n), p, nullptr);
    // The same elements in pieces of 1, 5, 37, ... at other addresses.
    std::vector<float> piece_param = param, piece_m = m, piece_v = v;
    std::vector<HostAdamWPiece> pieces;
    std::size_t at = 0;
    for (std::size_t size = 1; at < n; size = size * 3 + 2) {
      const std::size_t count = std::min(size, n - at);
      pieces.push_back({piece_param.data() + at, grad.data() + at, piece_m.data() + at, piece_v.data() + at,
                        std::int64_t(count),
                        {reinterpret_cast<std::uintptr_t>(base), std::int64_t(n), std::int64_t(at)}});
      at += count;
    }
    host_adamw_step(pieces, p, nullptr);
    EXPECT_TRUE(std::equal(piece_param.begin(), piece_param.end(), base)) << "shift " << shift;
    EXPECT_EQ(piece_m, reference_m);
    EXPECT_EQ(piece_v, reference_v);
  }
}

TEST(Offload, RunsEqualTheRunWithoutOffloadAndMoveThePlannedBytes) {
  const RunResult reference = train(offload_plan(R"("none")"), 0);
  for (const std::string offload : {R"("optimizer")", R"({"mode": "chunked", "device_fraction": 0.25})",
                                    R"({"mode": "chunked", "device_fraction": 0.5})",
                                    R"({"mode": "chunked", "device_fraction": 1.0})"}) {
    SCOPED_TRACE(offload);
    const Plan plan = offload_plan(offload);
    const RunResult run = train(plan, kRoomyBudget);
    EXPECT_EQ(run.losses, reference.losses);
    EXPECT_EQ(run.weights, reference.weights);
    const auto [up, down] = planned_bytes(plan);
    for (std::size_t s = 0; s < run.up_bytes.size(); ++s) {
      EXPECT_EQ(run.up_bytes[s], up) << "step " << s + 1;
      EXPECT_EQ(run.down_bytes[s], down) << "step " << s + 1;
    }
    if (plan.parallel.offload_device_fraction < 1.0) {
      EXPECT_GT(up, 0.0);
      EXPECT_GT(run.offload.prefetched_chunks, 0);
    }
    EXPECT_GT(run.offload.peak_non_model_bytes, 0u);
    EXPECT_LE(run.offload.peak_bytes, run.offload.budget_bytes);
  }
}

// The budget holds at every op: a run given its own peak as the budget passes, and the
// warm-up step (no prefetch) given one byte less than its peak is refused at an op it
// names; the less stays on the device, the lower the peak.
TEST(Offload, TheBudgetHoldsAtEveryOpAndLessOnTheDeviceNeedsLess) {
  std::size_t previous_peak = 0;
  for (const double fraction : {1.0, 0.5, 0.25}) {
    SCOPED_TRACE(fraction);
    const Plan plan = offload_plan(fmt::format(R"({{"mode": "chunked", "device_fraction": {}}})", fraction));
    const std::size_t peak = train(plan, kRoomyBudget, 3).offload.peak_bytes;
    EXPECT_LE(train(plan, peak, 3).offload.peak_bytes, peak);
    const std::size_t warm_up_peak = train(plan, kRoomyBudget, 1).offload.peak_bytes;
    try {
      train(plan, warm_up_peak - 1, 1);
      FAIL() << "a budget below the peak was accepted";
    } catch (const DeviceBudgetExceeded& e) {
      EXPECT_FALSE(e.op().empty());
      EXPECT_EQ(e.budget_bytes(), warm_up_peak - 1);
    }
    if (previous_peak > 0) {
      EXPECT_LT(warm_up_peak, previous_peak);
    }
    previous_peak = warm_up_peak;
  }
}

// With room, chunks are fetched a segment ahead from the second step on; a budget just
// above what fetching on demand needs still holds at every op (a prefetch waits for
// room), with the same losses and the same copies.
TEST(Offload, ChunksArePrefetchedOneSegmentAheadWhereTheTraceLeavesRoom) {
  const Plan plan = offload_plan(R"({"mode": "chunked", "device_fraction": 0.25})");
  const RunResult roomy = train(plan, kRoomyBudget, 3);
  EXPECT_GT(roomy.offload.prefetched_chunks, 0);
  const std::size_t budget = train(plan, kRoomyBudget, 1).offload.peak_bytes + 64;  // the update's scalars
  const RunResult tight = train(plan, budget, 3);
  EXPECT_LE(tight.offload.peak_bytes, budget);
  EXPECT_LE(tight.offload.prefetched_chunks, roomy.offload.prefetched_chunks);
  EXPECT_EQ(tight.losses, roomy.losses);
  EXPECT_EQ(tight.up_bytes, roomy.up_bytes);
}

TEST(Offload, ABudgetTooSmallForAnyPlacementIsRefusedWithTheSmallestThatWorks) {
  const Plan plan = offload_plan(R"({"mode": "chunked", "device_fraction": 0.25})");
  const double smallest = smallest_device_budget_bytes(plan.model, plan.train, plan.parallel, 0, 0.0);
  try {
    train(plan, std::size_t(smallest) - 1, 1);
    FAIL() << "a budget too small for any placement was accepted";
  } catch (const DeviceBudgetExceeded&) {
    FAIL() << "refused during the run, not before it";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(fmt::format("{:.0f} bytes", smallest)), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

// Before the run (what tessel run checks before the ranks start): model states as the
// chunk plan places them plus the planner's activations and trainer workspace for the
// stage. The named budget, at the named device_fraction, trains; one byte less is refused
// naming it; a budget the named placement fits but the plan's own placement does not is
// refused naming both, and the plan's own named need trains too. Returns the run at the
// named budget in `out` for the caller to hold to it.
struct NamedBudgetRun {
  std::size_t named_bytes = 0, peak_bytes = 0;
  bool losses_as_without_offload = false;
};

static void train_at_named_budget(const Plan& base, NamedBudgetRun& out) {
  const planner::MemoryBreakdown memory = planner::stage_memory(planner::CostModel::for_plan(base), base.parallel, 0);
  const double non_model = std::ceil(memory.non_model_bytes());  // run_command.cpp
  ASSERT_GT(memory.trainer_workspace_bytes, 0.0);
  const SmallestDeviceBudget smallest = smallest_device_budget(base.model, base.train, base.parallel, 0, non_model);
  EXPECT_EQ(smallest.bytes, smallest_device_budget_bytes(base.model, base.train, base.parallel, 0, non_model));
  Plan best = base;
  best.parallel.offload = OffloadMode::chunked;
  best.parallel.offload_device_fraction = smallest.device_fraction;
  const ChunkStageShape shape = chunk_stage_shape(base.model, base.parallel, 0);
  EXPECT_EQ(chunk_totals(shape, best.train, best.parallel, 1).device_total_bytes() + non_model, smallest.bytes);
  const auto named = std::size_t(smallest.bytes);
  EXPECT_NO_THROW(Trainer::check_device_budget(best, named, {non_model}));
  const RunResult at_named = train(best, named, 3);  // throws DeviceBudgetExceeded if the pool passes the budget
  out = {named, at_named.offload.peak_bytes, at_named.losses == train(base, kRoomyBudget, 3).losses};
  try {
    Trainer::check_device_budget(best, named - 1, {non_model});
    FAIL() << "one byte below the named budget was accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(fmt::format("smallest budget that works is {} bytes", named)), std::string::npos) << message;
    EXPECT_NE(message.find(fmt::format("device_fraction {:.6g}", smallest.device_fraction)), std::string::npos)
        << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  const double own = chunk_totals(shape, base.train, base.parallel, 1).device_total_bytes() + non_model;
  if (own > smallest.bytes) {
    try {
      Trainer::check_device_budget(base, named, {non_model});
      FAIL() << "the plan's own placement was accepted below its need";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fmt::format("this plan's placement of stage 0's model states with its {:.0f} "
                                                       "bytes of activations and workspace ({:.0f} bytes)",
                                                       non_model, own)),
                std::string::npos)
          << e.what();
    }
  }
  const RunResult at_own = train(base, std::size_t(std::ceil(own)), 3);
  EXPECT_LE(at_own.offload.peak_bytes, std::size_t(std::ceil(own)));
}


TEST(Offload, TheNamedBudgetsTrainAndOneByteLessIsRefusedBeforeTheRun) {
  for (const std::string offload : {R"({"mode": "chunked", "device_fraction": 0.25})",
                                    R"({"mode": "chunked", "device_fraction": 0.5})", R"("optimizer")"}) {
    for (const int layers : {4, 8}) {
      SCOPED_TRACE(offload + " layers " + std::to_string(layers));
      NamedBudgetRun run;
      train_at_named_budget(offload_plan(offload, layers), run);
      EXPECT_GT(run.peak_bytes, 0u);
      EXPECT_LE(run.peak_bytes, run.named_bytes);
      EXPECT_TRUE(run.losses_as_without_offload);
    }
  }
}

// A model whose states outweigh its activations, trained on a device of 0.7 of its
// weights, gradients and moments: the device cannot hold the weights and moments once,
// so they reach host memory bucket by bucket as they are drawn (the device holds the
// resident states and one bucket at most, under the budget from the start), as a model
// larger than a GPU must start.
static Plan wide_plan() {
  return Plan::from_json(Json::parse(R"({"model": {"name": "wide", "layers": 8, "hidden": 128, "heads": 4,
      "vocab": 256, "seq_len": 16}, "cluster": "local-cpu", "train": {"global_batch": 8, "precision": "fp32",
      "optimizer": "adamw"}, "parallel": {"dp": 1, "micro_batch": 1,
      "offload": {"mode": "chunked", "device_fraction": 0.25}}})"),
                         "");
}

TEST(Offload, AModelLargerThanTheDeviceStartsAndTrains) {
  const Plan wide = wide_plan();
  const double states = 16.0 * double(wide.model.parameter_count());  // fp32 weights, gradients, two moments
  const auto budget = std::size_t(0.7 * states);
  Plan plain = wide;
  plain.parallel.offload = OffloadMode::none;
  const RunResult run = train(wide, budget, 2);
  EXPECT_LE(run.offload.peak_bytes, budget);
  EXPECT_EQ(run.losses, train(plain, kRoomyBudget, 2).losses);
}

// The device holds weights, gradients and moments by executor bucket (a layer, the
// stage's tables), so the named budget counts buckets: where a chunk straddles two
// layers (this wide model's layers span several chunks) a fetch makes both layers'
// buffers live, and a bucket with a tensor in a resident chunk keeps its weights and
// steps whole on the device (counted by chunk, this wide model's pool passed its named
// budget); an untied LLaMA-shaped model's tables are a bucket fetched for the embedding
// and the head.
TEST(Offload, TheNamedBudgetsTrainWhereLayersSpanChunksAndTablesAreUntied) {
  const Plan llama_like = Plan::from_json(Json::parse(R"({"model": {"name": "llama-like", "layers": 4, "hidden": 64,
      "heads": 4, "vocab": 512, "seq_len": 16, "activation": "swiglu", "norm": "rmsnorm", "position_embedding": "rope",
      "tied_embeddings": false, "bias": false, "ffn_hidden": 176}, "cluster": "local-cpu", "train": {"global_batch": 8,
      "precision": "fp32", "optimizer": "adamw"}, "parallel": {"dp": 1, "micro_batch": 1,
      "offload": {"mode": "chunked", "device_fraction": 0.25}}})"),
                                          "");
  for (const Plan& plan : {wide_plan(), llama_like}) {
    SCOPED_TRACE(plan.model.name);
    NamedBudgetRun run;
    train_at_named_budget(plan, run);
    EXPECT_GT(run.peak_bytes, 0u);
    EXPECT_LE(run.peak_bytes, run.named_bytes);
    EXPECT_TRUE(run.losses_as_without_offload);
  }
}

TEST(Offload, ResumeFromACheckpointWithChunksOnTheHostIsBitExact) {
  const Plan plan = offload_plan(R"({"mode": "chunked", "device_fraction": 0.25})");
  const fs::path dir = fs::temp_directory_path() / ("tessel_offload_checkpoint_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const RunResult uninterrupted = train(plan, kRoomyBudget);
  std::vector<float> losses;
  {
    SingleRankCommunicator world;
    ProcessGrid grid(plan.parallel, world);
    Trainer first(plan, grid, DataLoader(synthetic_corpus(1 << 14, 3), 8, 16), test_options(kRoomyBudget));
    for (int s = 0; s < 2; ++s) losses.push_back(first.step().loss);
    first.save(dir.string());
  }
  SingleRankCommunicator world;
  ProcessGrid grid(plan.parallel, world);
  Trainer resumed(plan, grid, DataLoader(synthetic_corpus(1 << 14, 3), 8, 16), test_options(kRoomyBudget));
  resumed.load(dir.string());
  for (int s = 0; s < 3; ++s) losses.push_back(resumed.step().loss);
  EXPECT_EQ(losses, uninterrupted.losses);
  EXPECT_EQ(resumed.whole_parameters(), uninterrupted.weights);
  fs::remove_all(dir);
}

// On a fake device whose memory the host may not touch (a host read or write of device
// memory dies with SIGSEGV), the manager's copies go through the backend and the host
// optimizer reads host memory only: the same bits as the CPU backend.
TEST(Offload, OnAFakeDeviceEqualsTheCpuBackend) {
  for (const std::string offload : {R"("optimizer")", R"({"mode": "chunked", "device_fraction": 0.25})"}) {
    SCOPED_TRACE(offload);
    const Plan plan = offload_plan(offload);
    kernels::ProtectedMemoryBackend device;
    const RunResult want = train(plan, kRoomyBudget, 3);
    const RunResult got = train(plan, kRoomyBudget, 3, device);
    EXPECT_EQ(got.losses, want.losses);
    EXPECT_EQ(got.weights, want.weights);
    EXPECT_EQ(got.up_bytes, want.up_bytes);
    EXPECT_GT(device.ops(), 1000u);
  }
}

TEST(Offload, OptimizersOtherThanAdamWAreRefusedInOneLine) {
  Plan plan = offload_plan(R"("optimizer")");
  plan.train.optimizer = Optimizer::lamb;
  try {
    Trainer::check(plan);
    FAIL() << "LAMB with offload was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("adamw"), std::string::npos) << e.what();
  }
}

// dp 2 with ZeRO 2 and 3, pp 2, and dp 2 ZeRO 1 in bf16, each with offload optimizer and chunked at 0.25, 0.5
// and 1.0, equal the layout without offload bit for bit on 2 ranks, move the chunk
// plan's bytes, and resume from a checkpoint with chunks on the host bit-exactly
// (offload_check.cpp under mpirun).
TEST(Offload, LayoutsAcrossRanksEqualTheRunWithoutOffload) {
  int status = -1;
  const std::string output = run_command("mpirun --allow-run-as-root --oversubscribe -np 2 '" +
                                             std::string(TESSEL_OFFLOAD_CHECK_BINARY) + "' 2>&1",
                                         status);
  EXPECT_EQ(status, 0) << output;
  std::size_t ok = 0;
  for (std::size_t at = output.find("  ok\n"); at != std::string::npos; at = output.find("  ok\n", at + 1)) ++ok;
  EXPECT_EQ(ok, 4u * 4u * 2u) << output;
  EXPECT_NE(output.find("rank 0: steps 3..5 and weights bit-identical"), std::string::npos) << output;
  EXPECT_NE(output.find("rank 1: steps 3..5 and weights bit-identical"), std::string::npos) << output;
  EXPECT_EQ(output.find("FAILED"), std::string::npos) << output;
}
