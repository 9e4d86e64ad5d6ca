// Data-parallel training over MPI equals the single-process run (tests/executor/dp_check.cpp).
#include <gtest/gtest.h>

#include <string>

#include "tessel/core/subprocess.hpp"

namespace {
std::string run_ranks(int ranks, const std::string& optimizer, int& status) {
  return tessel::run_command("mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(ranks) + " '" +
                                 TESSEL_DP_CHECK_BINARY + "' " + optimizer + " 2>&1",
                             status);
}
int count_ok(const std::string& output) {
  int ok = 0;
  for (std::size_t at = output.find("ok rank"); at != std::string::npos; at = output.find("ok rank", at + 1)) ++ok;
  return ok;
}
}  // namespace

TEST(DataParallel, TwoRanksEqualOneProcessWithAdamW) {
  int status = -1;
  const std::string output = run_ranks(2, "adamw", status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(count_ok(output), 2) << output;
}

TEST(DataParallel, FourRanksEqualOneProcessWithLamb) {
  int status = -1;
  const std::string output = run_ranks(4, "lamb", status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(count_ok(output), 4) << output;
}

TEST(DataParallel, TwoRanksEqualOneProcessWithLars) {
  int status = -1;
  const std::string output = run_ranks(2, "lars", status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(count_ok(output), 2) << output;
}
