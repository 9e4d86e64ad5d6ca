// `tessel run` when its ranks or launcher misbehave: no rank started, a rank stopped or
// killed mid-run, mpirun killed during the first checkpoint, a token file cut short, the
// launcher killed with its ranks. Each ends within a stated time with one line naming the
// rank, launcher or file, and the runs database never keeps a launcher-less run running.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli_fixture.hpp"
#include "cli_run_helpers.hpp"

using namespace tessel_cli_test;

namespace {
// The pids of this test's ranks: tessel-rank processes (not mpirun, whose command line
// names them too) whose command lines name the test's folder.
std::vector<pid_t> rank_pids(const std::string& marker) {
  std::vector<pid_t> out;
  FILE* pipe = popen(("pgrep -f '^[^ ]*tessel-rank .*" + marker + "'").c_str(), "r");
  if (pipe == nullptr) return out;
  long pid = 0;
  while (std::fscanf(pipe, "%ld", &pid) == 1) out.push_back(pid_t(pid));
  pclose(pipe);
  return out;
}

// `tessel run ARGS` started in the background with `environment` before it, its output
// in the test's folder as out and err.
pid_t start_run(const fs::path& dir, const std::string& args, const std::string& environment = "") {
  const std::string command = environment + " exec " + std::string(TESSEL_BINARY) + " run " + args + " >" +
                              (dir / "out").string() + " 2>" + (dir / "err").string() + " </dev/null";
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

bool wait_for_output(const fs::path& file, const std::string& text, double limit_s) {
  const auto start = std::chrono::steady_clock::now();
  while (slurp(file).find(text) == std::string::npos && seconds_since(start) < limit_s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return slurp(file).find(text) != std::string::npos;
}
}  // namespace

TEST_F(Cli, ALauncherThatStartsNoRankIsStoppedWithinTheStartupTime) {
  // An mpirun that never starts a rank (as under `ulimit -f` with PMIx failing).
  const fs::path bin = dir_ / "bin";
  fs::create_directories(bin);
  std::ofstream(bin / "mpirun") << "#!/bin/sh\nexec sleep 600\n";
  fs::permissions(bin / "mpirun", fs::perms::owner_all);
  const auto start = std::chrono::steady_clock::now();
  const pid_t tessel = start_run(dir_,
                                 "--plan " + write("tiny.json", kTinyPlan).string() + " --steps 3 --launcher mpirun --db " +
                                     (dir_ / "r.db").string(),
                                 "PATH=" + bin.string() + ":$PATH TESSEL_WATCHDOG_S=3");
  const int raw = wait_at_most(tessel, 60.0);
  EXPECT_LT(seconds_since(start), 30.0);
  ASSERT_TRUE(WIFEXITED(raw));
  EXPECT_NE(WEXITSTATUS(raw), 0);
  EXPECT_NE(slurp(dir_ / "err").find("tessel: error: run: rank 0, 1 did not start within 3 s of the launch (mpirun "
                                     "could not start them)"),
            std::string::npos)
      << slurp(dir_ / "err");
}

TEST_F(Cli, AStoppedRankIsNamedAndTheJobStopped) {
  const std::string db = (dir_ / "r.db").string();
  const pid_t tessel = start_run(dir_, "--plan " + write("tiny.json", kTinyPlan).string() + " --steps 100000 --db " + db,
                                 "TESSEL_WATCHDOG_S=5");
  ASSERT_TRUE(wait_for_output(dir_ / "out", "step 2 ", 60)) << slurp(dir_ / "err");
  const std::vector<pid_t> ranks = rank_pids(dir_.filename().string());
  ASSERT_EQ(ranks.size(), 2u);
  ASSERT_EQ(kill(ranks[1], SIGSTOP), 0);
  const auto stopped = std::chrono::steady_clock::now();
  const int raw = wait_at_most(tessel, 90.0);
  EXPECT_LT(seconds_since(stopped), 45.0);
  ASSERT_TRUE(WIFEXITED(raw));
  EXPECT_NE(WEXITSTATUS(raw), 0);
  const std::string err = slurp(dir_ / "err");
  EXPECT_NE(err.find("has been silent for 5 s (stopped by a signal)"), std::string::npos) << err;
  EXPECT_NE(err.find("(pid " + std::to_string(ranks[1]) + ")"), std::string::npos) << err;
  EXPECT_FALSE(ranks_alive(dir_.filename().string()));
  const tessel::profiles::RunRecord record = only_run(db);
  EXPECT_NE(record.status, "running");
}

TEST_F(Cli, MpirunKilledDuringTheFirstCheckpointIsWaitedForAndNamed) {
  const std::string db = (dir_ / "r.db").string(), checkpoint = (dir_ / "ck").string();
  // The first checkpoint is the one the ranks write when mpirun's death stops them.
  const pid_t tessel = start_run(dir_, "--plan " + write("tiny.json", kTinyPlan).string() +
                                           " --steps 100000 --checkpoint-every 100000 --db " + db + " --checkpoint " +
                                           checkpoint);
  ASSERT_TRUE(wait_for_output(dir_ / "out", "step 2 ", 60)) << slurp(dir_ / "err");
  FILE* pipe = popen(("pgrep -P " + std::to_string(tessel) + " mpirun").c_str(), "r");
  long mpirun = 0;
  ASSERT_EQ(std::fscanf(pipe, "%ld", &mpirun), 1);
  pclose(pipe);
  ASSERT_EQ(kill(pid_t(mpirun), SIGKILL), 0);
  const int raw = wait_at_most(tessel, 60.0);
  ASSERT_TRUE(WIFEXITED(raw));
  const std::string err = slurp(dir_ / "err");
  EXPECT_NE(err.find("tessel: error: run: mpirun was killed by SIGKILL"), std::string::npos) << err;
  EXPECT_EQ(err.find("cannot rename"), std::string::npos) << err;
  EXPECT_FALSE(ranks_alive(dir_.filename().string()));
  // The ranks finished the checkpoint they were writing, and tessel left it in place.
  ASSERT_TRUE(fs::exists(fs::path(checkpoint) / "checkpoint.json")) << err;
  const tessel::profiles::RunRecord record = only_run(db);
  EXPECT_NE(record.status, "running");
  const auto meta = nlohmann::json::parse(slurp(fs::path(checkpoint) / "checkpoint.json"));
  EXPECT_EQ(meta.at("step").get<int>(), record.completed_steps);
}

TEST_F(Cli, ARankKilledByASignalIsReportedByTheSignalsName) {
  const pid_t tessel = start_run(dir_, "--plan " + write("tiny.json", kTinyPlan).string() + " --steps 100000 --db " +
                                           (dir_ / "r.db").string());
  ASSERT_TRUE(wait_for_output(dir_ / "out", "step 2 ", 60)) << slurp(dir_ / "err");
  const std::vector<pid_t> ranks = rank_pids(dir_.filename().string());
  ASSERT_EQ(ranks.size(), 2u);
  ASSERT_EQ(kill(ranks[1], SIGXFSZ), 0);
  const int raw = wait_at_most(tessel, 60.0);
  ASSERT_TRUE(WIFEXITED(raw));
  EXPECT_NE(slurp(dir_ / "err").find("(SIGXFSZ: File size limit exceeded)"), std::string::npos) << slurp(dir_ / "err");
  EXPECT_FALSE(ranks_alive(dir_.filename().string()));
}

TEST_F(Cli, ATokenFileCutShortUnderTheJobStopsItNamingTheFile) {
  // uint16 ids below the tiny model's vocabulary of 256, 4 MiB of them.
  const fs::path data = dir_ / "tokens.bin";
  {
    std::ofstream out(data, std::ios::binary);
    for (int i = 0; i < (1 << 21); ++i) {
      const std::uint16_t id = std::uint16_t(i % 251);
      out.write(reinterpret_cast<const char*>(&id), sizeof id);
    }
  }
  const pid_t tessel = start_run(dir_, "--plan " + write("tiny.json", kTinyPlan).string() + " --steps 100000 --data " +
                                           data.string() + " --db " + (dir_ / "r.db").string());
  ASSERT_TRUE(wait_for_output(dir_ / "out", "step 2 ", 60)) << slurp(dir_ / "err");
  EXPECT_NE(slurp(dir_ / "out").find("data: " + data.string() + " read as nanogpt (2097152 tokens of uint16)"),
            std::string::npos)
      << slurp(dir_ / "out");
  fs::resize_file(data, 1024);
  const int raw = wait_at_most(tessel, 60.0);
  ASSERT_TRUE(WIFEXITED(raw));
  EXPECT_NE(WEXITSTATUS(raw), 0);
  EXPECT_NE(slurp(dir_ / "err").find("--data: " + data.string() + ": the file shrank while the run read it"),
            std::string::npos)
      << slurp(dir_ / "err");
  EXPECT_FALSE(ranks_alive(dir_.filename().string()));
}

// The launcher and its ranks killed outright (a machine's out-of-memory killer, a
// scheduler's kill of the whole job): nothing can record how the run ended, so the next
// reader of the runs does, from the launcher's pid and host the run carries.
TEST_F(Cli, ARunWhoseLauncherAndRanksWereKilledIsReadAsFailed) {
  const std::string db = (dir_ / "r.db").string();
  const pid_t tessel = start_run(dir_, "--plan " + write("tiny.json", kTinyPlan).string() + " --steps 100000 --db " + db);
  ASSERT_TRUE(wait_for_output(dir_ / "out", "step 2 ", 60)) << slurp(dir_ / "err");
  const std::vector<pid_t> ranks = rank_pids(dir_.filename().string());
  ASSERT_EQ(kill(tessel, SIGKILL), 0);
  for (pid_t rank : ranks) kill(rank, SIGKILL);
  wait_at_most(tessel, 10.0);
  const auto killed = std::chrono::steady_clock::now();
  while (ranks_alive(dir_.filename().string()) && seconds_since(killed) < 30) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const tessel::profiles::RunRecord record = only_run(db);
  EXPECT_EQ(record.status, "failed");
  EXPECT_NE(record.message.find("tessel run " + std::to_string(tessel) + " on "), std::string::npos) << record.message;
  EXPECT_NE(record.message.find("ended without recording how the run ended"), std::string::npos) << record.message;
  // Recorded, not only shown: a read-only reader sees the same.
  tessel::profiles::ProfileStore store(db, tessel::profiles::ProfileStore::Access::read_only);
  EXPECT_EQ(tessel::profiles::RunStore(store).runs().front().status, "failed");
}
