// Every Backend op against the CPU reference (the idea of ggml's test-backend-ops): ONE
// table lists each kernel op of backend.hpp with its tolerance per element type and the
// case that builds its inputs; outputs are compared by norm-wise relative difference. Used
// by backend_ops_test.cpp (CPU in bf16 storage) and backend_ops_cuda_test.cpp (CUDA in
// fp32, bf16 and fp16, on a GPU machine, with the device shapes too).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <vector>

#include "backend_ops_cases.hpp"

namespace tessel::kernels::ops_test {

struct OpCase {
  const char* name;  // the Backend member function
  double f32_tolerance;
  double bf16_tolerance;  // also fp16's: its 11 significant bits round finer than bf16's 8
  void (*run)(OpRun&);
};

// Tolerances: fp32 <= 1e-5 (summation order and the device's transcendentals), bf16 <=
// 2e-2 relative (inputs and outputs rounded to 8 significant bits).
constexpr double kF32 = 1e-5, kBf16 = 2e-2;
constexpr std::uint32_t kSeed = 20240613;

std::span<const OpCase> op_table();

// Which variants a run draws: fp8 GEMMs where the device has them (both sides alike), and
// the device shapes (OpRun::device_shapes) for the GPU check.
struct OpShapes {
  bool fp8 = true;
  bool device_shapes = false;
};

std::vector<Output> run_op(const OpCase& op, Backend& backend, DType compute, const OpShapes& shapes = {});

// `op` on `other` in `other_type` against the CPU in `reference_type`, every output within
// `tolerance` (or the output's own floor); the failure names each output that is not.
::testing::AssertionResult matches(const OpCase& op, Backend& other, DType other_type, DType reference_type,
                                   double tolerance, const OpShapes& shapes = {});

// The fixture of the tests that run over the op table: the parameter is the op's row.
class OpTableTest : public ::testing::TestWithParam<std::size_t> {
 protected:
  const OpCase& op() const { return op_table()[GetParam()]; }
};

}  // namespace tessel::kernels::ops_test
