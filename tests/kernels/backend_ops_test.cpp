// The op table (backend_ops_table.hpp) on the CPU: bf16 storage against the CPU in fp32,
// repeatability bit for bit, the table's coverage of backend.hpp and the harness itself.
// The CUDA backend's run of the same table is backend_ops_cuda_test.cpp (label gpu).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "backend_ops_table.hpp"

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::kernels::ops_test;

namespace {

class BackendOps : public OpTableTest {};

TEST_P(BackendOps, CpuBf16StorageMatchesCpuFp32) {
  EXPECT_TRUE(matches(op(), cpu_backend(), DType::bf16, DType::f32, op().bf16_tolerance));
}

// The device shapes (only the GPU check compares them across backends) run on the CPU
// too, so a case that reads past its inputs or leaves an output unwritten is found here
// and not on a lent GPU.
TEST_P(BackendOps, DeviceShapesRunOnTheCpu) {
  OpShapes shapes;
  shapes.device_shapes = true;
  EXPECT_TRUE(matches(op(), cpu_backend(), DType::bf16, DType::f32, op().bf16_tolerance, shapes));
}

TEST_P(BackendOps, CpuIsRepeatableBitForBit) {
  const std::vector<Output> first = run_op(op(), cpu_backend(), DType::f32);
  const std::vector<Output> second = run_op(op(), cpu_backend(), DType::f32);
  ASSERT_EQ(first.size(), second.size());
  for (std::size_t i = 0; i < first.size(); ++i) EXPECT_EQ(first[i].values, second[i].values) << first[i].label;
}

INSTANTIATE_TEST_SUITE_P(Table, BackendOps, ::testing::Range<std::size_t>(0, op_table().size()),
                         [](const ::testing::TestParamInfo<std::size_t>& info) {
                           return std::string(op_table()[info.param].name);
                         });

// The kernel ops backend.hpp declares: every `virtual ... name(Stream` member except the
// memory, stream and timing functions, which are not kernels.
std::set<std::string> header_ops() {
  std::ifstream file(std::string(TESSEL_SOURCE_DIR) + "/kernels/include/tessel/kernels/backend.hpp");
  std::stringstream text;
  text << file.rdbuf();
  const std::string header = text.str();
  const std::set<std::string> not_kernels = {"upload", "download", "copy", "wait_for", "synchronize", "mark"};
  const std::regex member(R"(virtual\s+[\w:<>*&\s]+?\b(\w+)\s*\(\s*Stream\b)");
  std::set<std::string> names;
  for (auto it = std::sregex_iterator(header.begin(), header.end(), member); it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[1];
    if (!not_kernels.count(name)) names.insert(name);
  }
  return names;
}

TEST(BackendOpsTable, CoversEveryOpOfTheInterface) {
  const std::set<std::string> declared = header_ops();
  ASSERT_GE(declared.size(), 40u) << "backend.hpp was not read or parsed (" << TESSEL_SOURCE_DIR << ")";
  std::set<std::string> listed;
  for (const OpCase& op : op_table()) EXPECT_TRUE(listed.insert(op.name).second) << op.name << " is listed twice";
  for (const std::string& name : declared)
    EXPECT_TRUE(listed.count(name)) << "backend.hpp declares " << name << " but the op table does not test it";
  for (const std::string& name : listed)
    EXPECT_TRUE(declared.count(name)) << name << " is in the op table but not an op of backend.hpp";
}

TEST(BackendOpsTable, TolerancesStayWithinTheStatedBounds) {
  for (const OpCase& op : op_table()) {
    EXPECT_LE(op.f32_tolerance, kF32) << op.name;
    EXPECT_LE(op.bf16_tolerance, kBf16) << op.name;
    // Per-output floors are the GEMM precision modes' only, and bounded.
    for (const Output& output : run_op(op, cpu_backend(), DType::f32)) {
      EXPECT_LE(output.tolerance_floor, kTf32Tolerance) << op.name << "." << output.label;
      if (output.tolerance_floor > 0.0) {
        EXPECT_TRUE(std::string(op.name) == "gemm") << op.name << "." << output.label << " loosens its tolerance";
      }
    }
  }
}

// The harness itself: an op that forgets to write an element is caught by the poison.
TEST(BackendOpsHarness, AnUnwrittenOutputFailsTheComparison) {
  OpRun run(cpu_backend(), DType::f32, kSeed);
  const Ref x = run.out("x", 10);
  cpu_backend().fill(run.stream(), x, 9, 1.0f);  // one element short
  const std::vector<Output> outputs = run.finish();
  EXPECT_TRUE(std::isinf(relative_difference(std::vector<double>(10, 1.0), outputs[0].values)));
  EXPECT_EQ(relative_difference(std::vector<double>(9, 1.0), std::vector<double>(9, 1.0)), 0.0);
  EXPECT_NEAR(relative_difference({2.0, -4.0}, {2.0, -4.1}), 0.025, 1e-12);
}

TEST(BackendOpsHarness, TheSameSeedDrawsTheSameInputsOnEveryStorageType) {
  OpRun f32_run(cpu_backend(), DType::f32, kSeed), bf16_run(cpu_backend(), DType::bf16, kSeed);
  const CRef a = f32_run.in(100), b = bf16_run.in(100);
  const Ref a_out = f32_run.out("a", 100), b_out = bf16_run.out("b", 100);
  cpu_backend().convert(Stream::compute, a_out, a, 100);
  cpu_backend().convert(Stream::compute, b_out, b, 100);
  const double difference = relative_difference(f32_run.finish()[0].values, bf16_run.finish()[0].values);
  EXPECT_GT(difference, 0.0);  // bf16 rounds
  EXPECT_LE(difference, 1.0 / 256);
}

}  // namespace
