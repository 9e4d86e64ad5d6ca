// What `make fuzz` found, end to end through the `tessel` command: the input that crashed
// a reader gives one error line and status 2, as every bad input does.
#include <gtest/gtest.h>

#include <string>

#include "cli_fixture.hpp"

using namespace tessel_cli_test;

TEST_F(Cli, NumberOverflowInAPlanIsOneLineAndStatusTwo) {
  const auto plan = write("overflow.json", R"({"model": "gpt2-124m", "cluster": "dgx-a100",
    "train": {"global_batch": 5e406}, "parallel": {"dp": 8}})");
  const Outcome outcome = run("estimate --plan " + plan.string());
  EXPECT_EQ(outcome.status, 2) << outcome.err;
  EXPECT_EQ(outcome.err, "tessel: error: " + plan.string() + ": malformed JSON: number overflow parsing '5e406'\n");
  EXPECT_TRUE(outcome.out.empty()) << outcome.out;
}
