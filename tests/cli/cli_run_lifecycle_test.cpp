// `tessel run` from start to end when things go wrong: what it refuses before any rank
// starts (a plan too big for this machine, output paths it cannot write, a checkpoint
// beyond --steps, a checkpoint folder another run holds), how a signal to it stops every
// rank with a final checkpoint, and how failed and interrupted runs are recorded with the
// steps they completed. Runs train the smallest plan a few steps.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli_fixture.hpp"
#include "cli_run_helpers.hpp"
#include "tessel/profiles/run_store.hpp"

using namespace tessel_cli_test;

namespace {
// Terabytes of weights: no machine these tests run on holds it.
const char* kHugePlan = R"({"model": {"name": "huge", "layers": 96, "hidden": 12288, "heads": 96,
  "vocab": 50304, "seq_len": 2048}, "cluster": "local-cpu", "train": {"global_batch": 8, "precision": "fp32"},
  "parallel": {"dp": 2, "micro_batch": 1}})";
}  // namespace

TEST_F(Cli, RunRefusesAPlanLargerThanThisMachinesMemoryBeforeAnyRankStarts) {
  const auto start = std::chrono::steady_clock::now();
  const Outcome o = run("run --plan " + write("huge.json", kHugePlan).string() + " --steps 2 --db " +
                        (dir_ / "r.db").string());
  EXPECT_EQ(o.status, 2) << o.out << o.err;
  EXPECT_EQ(o.err.rfind("tessel: error: memory: the plan needs ", 0), 0u) << o.err;
  EXPECT_NE(o.err.find("available"), std::string::npos) << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  EXPECT_EQ(o.out.find("step 1"), std::string::npos) << o.out;
  EXPECT_FALSE(fs::exists(dir_ / "r.db"));
  EXPECT_LT(seconds_since(start), 10.0);
}

TEST_F(Cli, RunRefusesOutputPathsItCannotWriteBeforeTraining) {
  const std::string plan = write("tiny.json", kTinyPlan).string();
  const std::string file = write("a_file", "x").string();
  struct Refusal {
    std::string args, error;
  };
  const Refusal refusals[] = {
      {"--checkpoint " + file + "/ck", "tessel: error: --checkpoint: " + file + "/ck: cannot be created: " + file +
                                           " is not a folder\n"},
      {"--checkpoint " + file, "tessel: error: --checkpoint: " + file + ": exists and is not a folder\n"},
      {"--trace " + (dir_ / "missing" / "t.json").string(),
       "tessel: error: --trace: " + (dir_ / "missing" / "t.json").string() + ": the folder " +
           (dir_ / "missing").string() + " does not exist\n"},
      {"--trace " + dir_.string(), "tessel: error: --trace: " + dir_.string() + ": is a folder; name a file\n"},
  };
  for (const Refusal& refusal : refusals) {
    const Outcome o = run("run --plan " + plan + " --steps 2 --db " + (dir_ / "r.db").string() + " " + refusal.args);
    EXPECT_EQ(o.status, 2) << refusal.args;
    EXPECT_EQ(o.err, refusal.error);
    EXPECT_EQ(o.out.find("step 1"), std::string::npos) << o.out;
  }
  EXPECT_FALSE(fs::exists(dir_ / "r.db"));
}

TEST_F(Cli, RunRefusesACheckpointBeyondStepsOrCorruptBeforeAnyRankStarts) {
  const std::string plan = write("tiny.json", kTinyPlan).string(), checkpoint = (dir_ / "ck").string();
  ASSERT_EQ(run("run --plan " + plan + " --steps 3 --db " + (dir_ / "r.db").string() + " --checkpoint " + checkpoint).status, 0);
  const Outcome beyond = run("run --plan " + plan + " --steps 2 --resume " + checkpoint);
  EXPECT_EQ(beyond.status, 2);
  EXPECT_EQ(beyond.err, "tessel: error: --resume: " + checkpoint +
                            "/checkpoint.json: step 3 is beyond --steps 2: nothing would train (--steps counts from "
                            "step 0)\n");
  nlohmann::json meta = nlohmann::json::parse(slurp(fs::path(checkpoint) / "checkpoint.json"));
  meta["step"] = "three";
  std::ofstream(fs::path(checkpoint) / "checkpoint.json") << meta.dump();
  const Outcome typed = run("run --plan " + plan + " --steps 5 --resume " + checkpoint);
  EXPECT_EQ(typed.status, 2);
  EXPECT_EQ(typed.err, "tessel: error: --resume: " + checkpoint + "/checkpoint.json: step: must be an integer, got \"three\"\n");
}

TEST_F(Cli, ASecondRunOnTheSameCheckpointFolderIsRefused) {
  const fs::path checkpoint = dir_ / "ck";
  fs::create_directories(checkpoint);
  // Another run holds the folder's lock.
  const int fd = ::open((checkpoint / "lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const std::string pid = "4242\n";
  ASSERT_EQ(::write(fd, pid.data(), pid.size()), ssize_t(pid.size()));
  const Outcome o = run("run --plan " + write("tiny.json", kTinyPlan).string() + " --steps 2 --db " +
                        (dir_ / "r.db").string() + " --checkpoint " + checkpoint.string());
  ::close(fd);
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err, "tessel: error: --checkpoint: " + checkpoint.string() +
                       ": another run (pid 4242) is writing this folder; give each run its own\n");
  // Released, the folder takes the next run.
  const Outcome next = run("run --plan " + write("tiny.json", kTinyPlan).string() + " --steps 2 --db " +
                           (dir_ / "r.db").string() + " --checkpoint " + checkpoint.string());
  EXPECT_EQ(next.status, 0) << next.err;
}

TEST_F(Cli, AFailedRunIsRecordedWithTheStepsItCompleted) {
  const std::string db = (dir_ / "r.db").string();
  setenv("TESSEL_FAIL_AT", "1:3", 1);
  const Outcome o = run("run --plan " + write("tiny.json", kTinyPlan).string() + " --steps 5 --db " + db +
                        " --checkpoint " + (dir_ / "new_folder").string());
  unsetenv("TESSEL_FAIL_AT");
  EXPECT_NE(o.status, 0);
  // It failed before its first checkpoint: the folder it created is gone.
  EXPECT_FALSE(fs::exists(dir_ / "new_folder"));
  const tessel::profiles::RunRecord record = only_run(db);
  EXPECT_EQ(record.status, "failed");
  EXPECT_EQ(record.completed_steps, 2);
  EXPECT_EQ(record.steps, 5);
  EXPECT_NE(record.message.find("after 2 of 5 steps"), std::string::npos) << record.message;
}

// A scheduler's SIGTERM, or Ctrl-C (SIGINT, which the launcher used to ignore): every
// rank stops within seconds, after a final checkpoint, and the run is recorded as
// interrupted with the steps it completed.
TEST_F(Cli, ASignalStopsEveryRankWithAFinalCheckpointAndRecordsTheRunInterrupted) {
  for (const int signal : {SIGTERM, SIGINT}) {
    const std::string name = signal == SIGTERM ? "SIGTERM" : "SIGINT";
    const fs::path here = dir_ / name;
    fs::create_directories(here);
    const std::string db = (here / "r.db").string(), checkpoint = (here / "ck").string();
    const std::string command = std::string(TESSEL_BINARY) + " run --plan " + write("tiny.json", kTinyPlan).string() +
                                " --steps 100000 --db " + db + " --checkpoint " + checkpoint + " >" +
                                (here / "out").string() + " 2>" + (here / "err").string() + " </dev/null";
    const pid_t tessel = start_in_shell(command);
    ASSERT_GE(tessel, 0);
    ASSERT_TRUE(file_comes_to_hold(here / "out", "step 2 ", 60)) << slurp(here / "err");
    ASSERT_EQ(kill(tessel, signal), 0);
    const auto stopping = std::chrono::steady_clock::now();
    const int raw = wait_at_most(tessel, 30.0);
    EXPECT_LT(seconds_since(stopping), 15.0) << name;
    ASSERT_TRUE(WIFEXITED(raw)) << name;
    EXPECT_EQ(WEXITSTATUS(raw), 128 + signal) << name;
    EXPECT_FALSE(ranks_alive(dir_.filename().string())) << name;
    const tessel::profiles::RunRecord record = only_run(db);
    EXPECT_EQ(record.status, "interrupted") << name;
    EXPECT_GE(record.completed_steps, 2) << name;
    const auto meta = nlohmann::json::parse(slurp(fs::path(checkpoint) / "checkpoint.json"));
    EXPECT_EQ(meta.at("step").get<int>(), record.completed_steps) << name;
    EXPECT_NE(slurp(here / "err").find("tessel: run stopped by " + name), std::string::npos) << slurp(here / "err");
  }
}

// tessel killed outright: its launcher and ranks do not train on without it.
TEST_F(Cli, SigkillToTesselRunLeavesNoRankTraining) {
  const std::string command = std::string(TESSEL_BINARY) + " run --plan " + write("tiny.json", kTinyPlan).string() +
                              " --steps 100000 --db " + (dir_ / "r.db").string() + " >" + (dir_ / "out").string() +
                              " 2>&1 </dev/null";
  const pid_t tessel = start_in_shell(command);
  ASSERT_GE(tessel, 0);
  ASSERT_TRUE(file_comes_to_hold(dir_ / "out", "step 1 ", 60)) << slurp(dir_ / "out");
  ASSERT_EQ(kill(tessel, SIGKILL), 0);
  wait_at_most(tessel, 5.0);
  const auto killed = std::chrono::steady_clock::now();
  while (ranks_alive(dir_.filename().string()) && seconds_since(killed) < 30) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_FALSE(ranks_alive(dir_.filename().string()));
  EXPECT_LT(seconds_since(killed), 15.0);
}
