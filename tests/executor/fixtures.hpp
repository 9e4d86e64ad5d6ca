// The fixtures the executor's tests share, in one place so that each test file keeps only
// its own plans and assertions: a trainer on a world of one rank, a scratch folder per
// test, the one-line error a call raises, and running a check binary under mpirun and
// counting what it printed. Nothing here asserts: the TEST bodies do, on what it returns.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "support/error_of.hpp"
#include "support/scratch_folder.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/subprocess.hpp"
#include "tessel/executor/comm/single_rank_communicator.hpp"
#include "tessel/executor/trainer.hpp"

namespace tessel_executor_test {

// A trainer on a world of one rank (the world of `tessel run` without mpirun), seeded,
// with its learning rate, every other option at its default; owns its communicator and grid.
struct OneRank {
  tessel::executor::SingleRankCommunicator world;
  tessel::executor::ProcessGrid grid;
  tessel::executor::Trainer trainer;
  OneRank(const tessel::Plan& plan, const std::string& text, std::uint64_t seed,
          float lr = tessel::executor::TrainerOptions{}.lr)
      : grid(plan.parallel, world),
        trainer(plan, grid, tessel::executor::DataLoader(text, plan.train.global_batch, plan.seq_len()),
                options(seed, lr)) {}
  static tessel::executor::TrainerOptions options(std::uint64_t seed, float lr) {
    tessel::executor::TrainerOptions o;
    o.seed = seed;
    o.lr = lr;
    return o;
  }
};

// A folder per test and the one-line error a call raises, shared with the other modules' tests.
using tessel::test::error_of;
using tessel::test::ScratchFolderTest;

// `binary arguments` on `ranks` processes under mpirun: stdout and stderr together.
inline std::string run_under_mpirun(int ranks, const std::string& binary, const std::string& arguments, int& status) {
  return tessel::run_command("mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(ranks) + " '" + binary +
                                 "' " + arguments + " 2>&1",
                             status);
}

// How many times `word` stands in `output` (overlaps counted).
inline int count_of(const std::string& output, const std::string& word) {
  int n = 0;
  for (std::size_t at = output.find(word); at != std::string::npos; at = output.find(word, at + 1)) ++n;
  return n;
}

// What a check binary printed (stdout and stderr together) and how it exited.
struct CheckRun {
  int status = -1;
  std::string output;
};

// `binary arguments` on `ranks` processes under mpirun.
inline CheckRun run_check(int ranks, const std::string& binary, const std::string& arguments) {
  CheckRun run;
  run.output = run_under_mpirun(ranks, binary, arguments, run.status);
  return run;
}

// Whether `run` exited 0 and its output holds each word the given number of times; when
// not, every difference and the output.
inline ::testing::AssertionResult exits_0_and_prints(const CheckRun& run,
                                                     std::initializer_list<std::pair<std::string, int>> counts) {
  std::string differences;
  if (run.status != 0) differences += "exit status " + std::to_string(run.status) + "\n";
  for (const auto& [word, want] : counts) {
    const int got = count_of(run.output, word);
    if (got != want) differences += fmt::format("'{}' {} times, want {}\n", word, got, want);
  }
  if (differences.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << differences << run.output;
}

}  // namespace tessel_executor_test
