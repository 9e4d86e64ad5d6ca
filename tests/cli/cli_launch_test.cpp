// `tessel run` beyond one mpirun on one machine: many nodes through a hostfile (this
// machine named as two hosts), ranks the user started (mpirun -np N tessel run
// --launcher none), a GPU cluster's layout on CPU ranks (--backend cpu), and the one-line
// refusals of the launch and backend options. Each run trains 2 steps of a small model.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cli_fixture.hpp"

using namespace tessel_cli_test;

namespace {
// 4 ranks: tensor parallel 2 x data parallel 2 of a 2-layer model, a few ms per step.
const char* kFourRankCpuPlan = R"({"model": {"name": "small", "layers": 2, "hidden": 64, "heads": 4,
  "vocab": 256, "seq_len": 64}, "cluster": "local-cpu", "train": {"global_batch": 8, "precision": "fp32"},
  "parallel": {"dp": 2, "tp": 2, "micro_batch": 2}})";
// A GPU cluster's plan: one node of 8 A100s.
const char* kGpuPlan = R"({"model": {"name": "small", "layers": 2, "hidden": 64, "heads": 4,
  "vocab": 256, "seq_len": 64}, "cluster": "dgx-a100", "nodes": 1, "train": {"global_batch": 16, "precision": "fp32"},
  "parallel": {"dp": 4, "tp": 2, "micro_batch": 2}})";
}  // namespace

// Open MPI counts the names of one machine as one node, so each name is listed once per
// slot (its "HOST slots=N" form refuses two names of one host): mpirun still takes the
// hostfile path, and the ranks must train exactly as without it.
TEST_F(Cli, RunOnNodesOfAHostfileTrainsAsOnOneMachine) {
  const fs::path plan = write("four.json", kFourRankCpuPlan);
  const fs::path hosts = write("hosts", "localhost\nlocalhost\n127.0.0.1\n127.0.0.1\n");
  const std::string db = (dir_ / "runs.db").string();
  const Outcome spread = run("run --plan " + plan.string() + " --steps 2 --db " + db + " --hostfile " + hosts.string());
  ASSERT_EQ(spread.status, 0) << spread.out << spread.err;
  EXPECT_NE(spread.out.find("on 4 CPU ranks"), std::string::npos) << spread.out;
  EXPECT_NE(spread.out.find("wrote run 1 to " + db), std::string::npos) << spread.out;
  const Outcome local = run("run --plan " + plan.string() + " --steps 2 --db " + db);
  ASSERT_EQ(local.status, 0) << local.err;
  ASSERT_EQ(printed_losses(spread.out).size(), 2u) << spread.out;
  EXPECT_EQ(printed_losses(spread.out), printed_losses(local.out));
}

TEST_F(Cli, RanksStartedByTheUserBecomeTheWorkers) {
  const fs::path plan = write("two.json", kTinyPlan);
  const std::string db = (dir_ / "runs.db").string();
  const Outcome started = run("run --launcher none --plan " + plan.string() + " --steps 2 --db " + db,
                              "mpirun --allow-run-as-root --oversubscribe -np 2");
  ASSERT_EQ(started.status, 0) << started.out << started.err;
  EXPECT_NE(started.out.find("on 2 CPU ranks"), std::string::npos) << started.out;
  // auto finds the launcher's environment too; same seed, same losses.
  const Outcome automatic = run("run --plan " + plan.string() + " --steps 2 --db " + db,
                                "mpirun --allow-run-as-root --oversubscribe -np 2");
  ASSERT_EQ(automatic.status, 0) << automatic.err;
  ASSERT_EQ(printed_losses(started.out).size(), 2u) << started.out;
  EXPECT_EQ(printed_losses(started.out), printed_losses(automatic.out));
  // Too few ranks started for the plan: one line from the ranks, status 2.
  const Outcome short_world = run("run --launcher none --plan " + write("four.json", kFourRankCpuPlan).string() +
                                      " --steps 1 --db " + db,
                                  "mpirun --allow-run-as-root --oversubscribe -np 2");
  EXPECT_NE(short_world.status, 0);
  EXPECT_NE(short_world.err.find("dp*pp*tp*sp = 4 differs from the 2 MPI ranks running"), std::string::npos)
      << short_world.err;
}

TEST_F(Cli, BackendCpuRunsAGpuPlansLayoutOnCpuRanks) {
  const fs::path plan = write("gpu.json", kGpuPlan);
  const Outcome o = run("run --backend cpu --plan " + plan.string() + " --steps 2 --db " + (dir_ / "r.db").string());
  ASSERT_EQ(o.status, 0) << o.out << o.err;
  EXPECT_NE(o.out.find("on 8 CPU ranks"), std::string::npos) << o.out;
  EXPECT_EQ(printed_losses(o.out).size(), 2u) << o.out;
}

TEST_F(Cli, RunRefusesBadLaunchAndBackendOptionsOnOneLine) {
  const std::string plan = write("two.json", kTinyPlan).string();
  struct Refusal {
    std::string args, message;
  };
  const std::vector<Refusal> refusals = {
      {"--launcher ssh", "tessel: error: --launcher: must be auto, mpirun, srun or none, got ssh\n"},
      {"--backend rocm", "tessel: error: --backend: must be auto, cpu or cuda, got rocm\n"},
      {"--hostfile " + (dir_ / "none").string(), "tessel: error: --hostfile: " + (dir_ / "none").string() +
                                                     ": cannot open file\n"},
      {"--launcher srun --hostfile " + write("hosts", "localhost\n").string(),
       "tessel: error: --hostfile: only mpirun reads a hostfile; the launcher is srun\n"},
      {"--launcher none",
       "tessel: error: --launcher none: no rank in the environment (OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE, "
       "SLURM_PROCID/NTASKS or RANK/WORLD_SIZE) and the plan has 2 ranks\n"},
  };
  for (const Refusal& refusal : refusals) {
    const Outcome o = run("run --plan " + plan + " --steps 1 " + refusal.args);
    EXPECT_EQ(o.status, 2) << refusal.args;
    EXPECT_EQ(o.err, refusal.message);
    EXPECT_TRUE(o.out.empty()) << o.out;
  }
  // Asking for CUDA where there is none (every machine these tests run on without a GPU).
  const Outcome cuda = run("run --plan " + plan + " --steps 1 --backend cuda");
  if (cuda.status != 0) {
    EXPECT_EQ(cuda.status, 2);
    EXPECT_EQ(cuda.err.rfind("tessel: error: --backend cuda: this ", 0), 0u) << cuda.err;
    EXPECT_EQ(std::count(cuda.err.begin(), cuda.err.end(), '\n'), 1) << cuda.err;
  }
}
