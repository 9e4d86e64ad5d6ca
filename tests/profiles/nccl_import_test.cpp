// nccl-tests results become link samples: the text table (out-of-place time, ranks
// from the '#  Rank' lines), the structured JSON and JSON records.
#include <gtest/gtest.h>

#include "tessel/core/error.hpp"
#include "tessel/profiles/nccl_tests.hpp"

using namespace tessel;
using namespace tessel::profiles;

namespace {
// Shaped like all_reduce_perf output on 4 GPUs (numbers made up for the test).
const char* kTable = R"(# nThread 1 nGpus 4 minBytes 1024 maxBytes 1048576 step: 4(factor) warmup iters: 5 iters: 20
#
# Using devices
#  Rank  0 Group  0 Pid   1234 on     node01 device  0 [0x07] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   1234 on     node01 device  1 [0x0f] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid   1234 on     node01 device  2 [0x47] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid   1234 on     node01 device  3 [0x4e] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024           256     float     sum      -1    12.50    0.08    0.12      0    12.10    0.08    0.13      0
        4096          1024     float     sum      -1    13.00    0.32    0.47      0    12.90    0.32    0.48      0
       16384          4096     float     sum      -1    14.75    1.11    1.67      0    14.60    1.12    1.68      0
     1048576        262144     float     sum      -1    25.00   41.94   62.91      0    24.80   42.28   63.42    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 16.3
)";
}  // namespace

TEST(NcclImport, TextTableGivesOutOfPlaceTimes) {
  NcclImportOptions options;
  options.fabric = "dgx-h100/intra";
  options.collective = Collective::all_reduce;
  const auto samples = import_nccl_tests(kTable, "all_reduce.txt", options);
  ASSERT_EQ(samples.size(), 4u);
  EXPECT_EQ(samples[0].ranks, 4);
  EXPECT_DOUBLE_EQ(samples[0].bytes, 1024);
  EXPECT_DOUBLE_EQ(samples[0].seconds, 12.5e-6);
  EXPECT_DOUBLE_EQ(samples[3].seconds, 25e-6);
  EXPECT_EQ(samples[3].fabric, "dgx-h100/intra");
  // Without --collective and with no binary name in the text, the import says what is missing.
  options.collective.reset();
  try {
    import_nccl_tests(kTable, "all_reduce.txt", options);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_STREQ(error.what(), "all_reduce.txt: cannot tell which collective this is; pass --collective");
  }
  EXPECT_EQ(import_nccl_tests(std::string("# ./build/all_gather_perf -b 1K\n") + kTable, "x", options)[0].collective,
            Collective::all_gather);
}

TEST(NcclImport, JsonFormats) {
  NcclImportOptions options;
  options.fabric = "f/inter";
  options.collective = Collective::all_to_all;
  options.ranks = 8;
  const auto structured = import_nccl_tests(
      R"({"identifier": "nccl-tests structured output", "benchmark": [{"33554432": {"oop_time": 1494.0, "ip_time": 1459.0},
          "67108864": {"oop_time": 2846.5}}]})",
      "a.json", options);
  ASSERT_EQ(structured.size(), 2u);
  EXPECT_DOUBLE_EQ(structured[0].seconds, 1494e-6);
  EXPECT_EQ(structured[0].ranks, 8);
  options.collective.reset();
  options.ranks = 0;
  const auto records = import_nccl_tests(
      "{\"name\": \"AllReduce\", \"size\": 1024, \"time\": 19.2, \"gpus\": 4, \"inPlace\": 0}\n"
      "{\"name\": \"AllReduce\", \"size\": 1024, \"time\": 19.9, \"gpus\": 4, \"inPlace\": 1}\n"
      "{\"name\": \"AllReduce\", \"size\": 2048, \"time\": 19.4, \"gpus\": 4, \"inPlace\": 0}\n",
      "b.json", options);
  ASSERT_EQ(records.size(), 2u);  // in-place rows skipped
  EXPECT_EQ(records[1].collective, Collective::all_reduce);
  EXPECT_DOUBLE_EQ(records[1].seconds, 19.4e-6);
  EXPECT_THROW(import_nccl_tests("{\"hello\": 1}", "c.json", options), Error);
}
