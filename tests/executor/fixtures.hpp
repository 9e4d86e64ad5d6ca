// The fixtures the executor's tests share, in one place so that each test file keeps only
// its own plans and assertions: a trainer on a world of one rank, a scratch folder per
// test, the one-line error a call raises, and running a check binary under mpirun and
// counting what it printed. Nothing here asserts: every assertion stays in a TEST body.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/core/subprocess.hpp"
#include "tessel/executor/comm/single_rank_communicator.hpp"
#include "tessel/executor/trainer.hpp"

namespace tessel_executor_test {

// A trainer on a world of one rank (the world of `tessel run` without mpirun), seeded,
// every other option at its default; owns its communicator and grid.
struct OneRank {
  tessel::executor::SingleRankCommunicator world;
  tessel::executor::ProcessGrid grid;
  tessel::executor::Trainer trainer;
  OneRank(const tessel::Plan& plan, const std::string& text, std::uint64_t seed)
      : grid(plan.parallel, world),
        trainer(plan, grid, tessel::executor::DataLoader(text, plan.train.global_batch, plan.seq_len()), options(seed)) {}
  static tessel::executor::TrainerOptions options(std::uint64_t seed) {
    tessel::executor::TrainerOptions o;
    o.seed = seed;
    return o;
  }
};

// A test fixture with an empty folder of its own (named by suite, process and test, so
// that tests running at once never share one), removed after the test.
class ScratchFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           fmt::format("tessel_{}_{}_{}", test->test_suite_name(), ::getpid(), test->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

// The message of the tessel::Error `call` raises, or "no error".
inline std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const tessel::Error& error) {
    return error.what();
  }
  return "no error";
}

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

}  // namespace tessel_executor_test
