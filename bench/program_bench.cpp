// Program lowering speed: a gpt3-175b plan on 1024 GPUs (dp16 pp8 tp8, interleaved x2,
// 96 micro-batches) lowered to its per-stage op lists. Median of 5.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "tessel/core/program.hpp"

using namespace tessel;

int main() {
  const Plan plan = Plan::from_json(
      Json::parse(R"({"model": "gpt3-175b", "cluster": "dgx-a100", "nodes": 128, "train": {"global_batch": 1536},
        "parallel": {"dp": 16, "pp": 8, "tp": 8, "micro_batch": 1, "zero": 1, "recompute": "selective",
                     "schedule": "interleaved", "virtual_stages": 2}})"),
      "");
  std::vector<double> seconds;
  std::size_t ops = 0;
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const Program program = Program::lower(plan);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    ops = program.op_count();
  }
  std::sort(seconds.begin(), seconds.end());
  std::printf("lowered %s: %zu ops over %d stage programs in %.3f s (median of 5; %.2f Mops/s)\n",
              plan.parallel.summary().c_str(), ops, plan.parallel.pp, seconds[2], ops / seconds[2] / 1e6);
  return 0;
}
