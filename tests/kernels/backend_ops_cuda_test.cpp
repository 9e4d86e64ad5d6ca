// The op table (backend_ops_table.hpp) on the CUDA backend against the CPU reference, in
// fp32, bf16 and fp16 storage, with the device shapes too (sequence 1024 attention, 16K-row
// norms, rows that are and are not a multiple of the kernels' vector width), and each op
// repeatable bit for bit on the device. Label gpu: gpu-check runs it on a lent GPU.
#include <gtest/gtest.h>

#include <iostream>
#include <memory>
#include <string>

#include "backend_ops_table.hpp"
#include "gpu/gpu_required.hpp"

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::kernels::ops_test;

namespace {

class BackendOpsOnCuda : public OpTableTest {};

TEST_P(BackendOpsOnCuda, MatchesTheCpu) {
  TESSEL_REQUIRE_GPU();
  const std::unique_ptr<Backend> cuda = make_cuda_backend(0);
  ASSERT_TRUE(cuda);
  OpShapes shapes;
  shapes.fp8 = cuda_device_has_fp8(0);
  shapes.device_shapes = true;
  if (!shapes.fp8) std::cout << "device 0 has no fp8 tensor cores: the fp8 GEMM variants are not checked\n";
  EXPECT_TRUE(matches(op(), *cuda, DType::f32, DType::f32, op().f32_tolerance, shapes));
  EXPECT_TRUE(matches(op(), *cuda, DType::bf16, DType::bf16, op().bf16_tolerance, shapes));
  // fp8 GEMMs write fp32 or bf16 only (backend.hpp's Gemm): the fp16 run leaves them out.
  OpShapes f16_shapes = shapes;
  f16_shapes.fp8 = false;
  EXPECT_TRUE(matches(op(), *cuda, DType::f16, DType::f16, op().bf16_tolerance, f16_shapes));
  // Deterministic on the device too: two runs give the same bits.
  for (const DType type : {DType::f32, DType::bf16}) {
    const std::vector<Output> first = run_op(op(), *cuda, type, shapes), second = run_op(op(), *cuda, type, shapes);
    ASSERT_EQ(first.size(), second.size());
    for (std::size_t i = 0; i < first.size(); ++i)
      EXPECT_EQ(first[i].values, second[i].values) << first[i].label << " in " << to_string(type);
  }
}

INSTANTIATE_TEST_SUITE_P(Table, BackendOpsOnCuda, ::testing::Range<std::size_t>(0, op_table().size()),
                         [](const ::testing::TestParamInfo<std::size_t>& info) {
                           return std::string(op_table()[info.param].name);
                         });

}  // namespace
