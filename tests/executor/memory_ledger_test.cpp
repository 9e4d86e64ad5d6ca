// The memory ledger: live bytes and peaks by category, the peak of the total (not the
// sum of the peaks) with its mix; Buffers charge it under their category only while a
// ledger is current; and a one-rank run's model states measured to the byte against the
// exact formula (parameter count x bytes per parameter) and the planner's prediction.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "tessel/executor/buffer.hpp"
#include "tessel/executor/comm/single_rank_communicator.hpp"
#include "tessel/executor/memory_ledger.hpp"
#include "tessel/executor/trainer.hpp"
#include "tessel/planner/stage_memory.hpp"

using namespace tessel;
using namespace tessel::executor;

namespace {
std::int64_t at(const MemoryCounts& counts, MemoryCategory c) { return counts[c]; }
}  // namespace

TEST(MemoryLedger, PeakOfTheSumIsNotTheSumOfPeaks) {
  MemoryLedger ledger;
  ledger.allocated(MemoryCategory::parameters, 100);
  ledger.allocated(MemoryCategory::activations, 50);
  ledger.freed(MemoryCategory::activations, 50);
  ledger.allocated(MemoryCategory::workspace, 120);
  ledger.freed(MemoryCategory::workspace, 120);
  EXPECT_EQ(at(ledger.live(), MemoryCategory::parameters), 100);
  EXPECT_EQ(ledger.live().total(), 100);
  EXPECT_EQ(at(ledger.peaks(), MemoryCategory::activations), 50);
  EXPECT_EQ(at(ledger.peaks(), MemoryCategory::workspace), 120);
  // The peaks' sum is 270; the most ever live at once is 220, with this mix.
  EXPECT_EQ(ledger.total_peak_bytes(), 220);
  EXPECT_EQ(at(ledger.at_total_peak(), MemoryCategory::parameters), 100);
  EXPECT_EQ(at(ledger.at_total_peak(), MemoryCategory::workspace), 120);
  EXPECT_EQ(at(ledger.at_total_peak(), MemoryCategory::activations), 0);
  ledger.moved(MemoryCategory::parameters, MemoryCategory::gradients, 40);
  EXPECT_EQ(at(ledger.live(), MemoryCategory::gradients), 40);
  EXPECT_EQ(ledger.live().total(), 100);
  ledger.reset_peaks();
  EXPECT_EQ(ledger.total_peak_bytes(), 100);
  EXPECT_EQ(at(ledger.peaks(), MemoryCategory::workspace), 0);
}

// Offload's host states are counted apart from the device's categories and total.
TEST(MemoryLedger, HostStatesAreCountedApartFromTheDevicesTotal) {
  MemoryLedger ledger;
  ledger.allocated(MemoryCategory::parameters, 100);
  ledger.host_allocated(300);
  ledger.host_allocated(50);
  ledger.host_freed(300);
  EXPECT_EQ(ledger.total_peak_bytes(), 100);
  EXPECT_EQ(ledger.host_peak_bytes(), 350);
  const RankMemoryMeasured measured = measured_memory(ledger, 0);
  EXPECT_DOUBLE_EQ(measured.host_state_bytes, 350);
  EXPECT_DOUBLE_EQ(measured.total_peak_bytes, 100);
}

TEST(MemoryLedger, BuffersChargeTheCurrentLedgerUnderTheirCategory) {
  kernels::Backend& cpu = kernels::cpu_backend();
  MemoryLedger ledger;
  Buffer outside(cpu, DType::f32, 16);  // no ledger current: not counted
  {
    const MemoryLedger::Scope counted(ledger);
    Buffer weights(cpu, DType::f32);
    weights.set_category(MemoryCategory::parameters);
    weights.resize(10);
    EXPECT_EQ(at(ledger.live(), MemoryCategory::parameters), 40);
    weights.resize(5);  // capacity kept: nothing new
    EXPECT_EQ(at(ledger.live(), MemoryCategory::parameters), 40);
    weights.resize(20);  // grows: the old block goes, the new one comes
    EXPECT_EQ(at(ledger.live(), MemoryCategory::parameters), 80);
    EXPECT_EQ(ledger.total_peak_bytes(), 80);
    Buffer scratch(cpu, DType::f64, 4);
    EXPECT_EQ(at(ledger.live(), MemoryCategory::workspace), 32);  // unnamed: workspace
    swap(weights, scratch);  // the category travels with the memory
    EXPECT_EQ(scratch.category(), MemoryCategory::parameters);
    EXPECT_EQ(at(ledger.live(), MemoryCategory::parameters), 80);
    scratch.set_category(MemoryCategory::gradients);
    EXPECT_EQ(at(ledger.live(), MemoryCategory::gradients), 80);
    EXPECT_EQ(at(ledger.live(), MemoryCategory::parameters), 0);
    outside.release();  // charged nowhere: debits nothing
  }
  // Buffers gone: everything debited; the peaks stay.
  EXPECT_EQ(ledger.live().total(), 0);
  EXPECT_EQ(ledger.total_peak_bytes(), 112);
}

TEST(MemoryLedger, OneRankModelStatesAreExactlyParameterCountTimesBytes) {
  const Plan plan = Plan::from_json(Json::parse(R"({"model": {"name": "tiny", "layers": 2, "hidden": 32, "heads": 2,
      "vocab": 256, "seq_len": 16}, "cluster": "local-cpu", "train": {"global_batch": 4, "precision": "fp32",
      "optimizer": "adamw"}, "parallel": {"micro_batch": 2}})"),
                                    "");
  SingleRankCommunicator world;
  ProcessGrid grid(plan.parallel, world);
  Trainer trainer(plan, grid, DataLoader(synthetic_corpus(4096, 1), plan.train.global_batch, plan.seq_len()),
                  TrainerOptions{});
  trainer.step();
  trainer.step();
  const std::int64_t count = plan.model.parameter_count();
  const MemoryLedger& memory = trainer.memory();
  // fp32 master weights (the compute type is fp32: no copy), fp32 gradients, AdamW's two moments.
  EXPECT_EQ(at(memory.peaks(), MemoryCategory::parameters), 4 * count);
  EXPECT_EQ(at(memory.peaks(), MemoryCategory::gradients), 4 * count);
  EXPECT_EQ(at(memory.peaks(), MemoryCategory::optimizer), 8 * count);
  EXPECT_GT(at(memory.peaks(), MemoryCategory::activations), 0);
  EXPECT_GE(memory.total_peak_bytes(), 16 * count + at(memory.at_total_peak(), MemoryCategory::activations));
  // The planner predicts the same model states to the byte.
  const planner::CostModel model(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(),
                                 profiles::shipped_profile("local-cpu"));
  const planner::MemoryBreakdown predicted = planner::stage_memory(model, plan.parallel, 0);
  EXPECT_DOUBLE_EQ(predicted.parameters_bytes, double(4 * count));
  EXPECT_DOUBLE_EQ(predicted.gradients_bytes, double(4 * count));
  EXPECT_DOUBLE_EQ(predicted.optimizer_bytes, double(8 * count));
}

TEST(MemoryLedger, TheCpuBackendCannotTellItsDevicePeakApart) {
  EXPECT_EQ(kernels::cpu_backend().device_peak_bytes(), 0u);
}
