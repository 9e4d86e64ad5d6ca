// Every Backend op against the CPU reference (the idea of ggml's test-backend-ops): ONE
// table below lists each kernel op of backend.hpp with its tolerance per element type
// and the case that builds its inputs (backend_ops_cases.hpp). Each op runs on the CPU
// and on a second backend from the same seed, outputs poisoned first, and every output
// is compared by the norm-wise relative difference (backend_ops_harness.hpp).
//   - CpuBf16: the CPU with bf16 storage against the CPU in fp32. It needs no GPU, so CI
//     runs it: it checks the bf16 column of the table and the harness itself.
//   - Cuda: make_cuda_backend(0) against the CPU, in fp32 and in bf16; skipped with a
//     message where no CUDA device is present.
// TableCoversEveryOp reads backend.hpp itself: an op added there and not here fails it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "backend_ops_cases.hpp"

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::kernels::ops_test;

namespace {

struct OpCase {
  const char* name;  // the Backend member function
  double f32_tolerance;
  double bf16_tolerance;
  void (*run)(OpRun&);
};

// Tolerances: fp32 <= 1e-5 (summation order and the device's transcendentals), bf16 <=
// 2e-2 relative (inputs and outputs rounded to 8 significant bits). The bf16 column bounds
// bf16 storage against the fp32 reference, so ops that only move elements (exact within
// a type, 0 in the fp32 column) still see the rounding of their inputs there. Ops on fp32-only
// tensors (optimizers, statistics) take the fp32 tolerance in both columns: bf16 storage
// does not reach them.
constexpr double kF32 = 1e-5, kBf16 = 2e-2;
const OpCase kOps[] = {
    // data movement and element-wise
    {"fill", 0.0, 0.0, run_fill},  // exact in every type
    {"convert", 0.0, kBf16, run_convert},
    {"copy_2d", 0.0, kBf16, run_copy_2d},  // bytes moved: exact within a type
    {"transpose", 0.0, kBf16, run_transpose},
    {"add", kF32, kBf16, run_add},
    {"scale", kF32, kBf16, run_scale},
    {"residual", kF32, kBf16, run_residual},
    {"add_bias", kF32, kBf16, run_add_bias},
    {"bias_gradient", kF32, kBf16, run_bias_gradient},
    {"add_rows", kF32, kBf16, run_add_rows},
    {"add_rows_backward", kF32, kBf16, run_add_rows_backward},
    {"gather_sum_rows", kF32, kBf16, run_gather_sum_rows},
    {"rows_to_heads", 0.0, kBf16, run_rows_to_heads},
    {"heads_to_rows", 0.0, kBf16, run_heads_to_rows},
    // matrix products
    {"gemm", kF32, kBf16, run_gemm},
    {"gemm_batched", kF32, kBf16, run_gemm_batched},
    // norms
    {"layer_norm_forward", kF32, kBf16, run_layer_norm_forward},
    {"layer_norm_backward", kF32, kBf16, run_layer_norm_backward},
    {"rms_norm_forward", kF32, kBf16, run_rms_norm_forward},
    {"rms_norm_backward", kF32, kBf16, run_rms_norm_backward},
    {"residual_layer_norm_forward", kF32, kBf16, run_residual_layer_norm_forward},
    {"residual_rms_norm_forward", kF32, kBf16, run_residual_rms_norm_forward},
    {"row_sums", kF32, kBf16, run_row_sums},
    {"row_centered_square_sums", kF32, kBf16, run_row_centered_square_sums},
    {"finish_mean", kF32, kF32, run_finish_mean},
    {"finish_rstd", kF32, kF32, run_finish_rstd},
    {"layer_norm_apply", kF32, kBf16, run_layer_norm_apply},
    {"layer_norm_backward_partials", kF32, kBf16, run_layer_norm_backward_partials},
    {"layer_norm_backward_apply", kF32, kBf16, run_layer_norm_backward_apply},
    // activations
    {"gelu_forward", kF32, kBf16, run_gelu_forward},
    {"gelu_backward", kF32, kBf16, run_gelu_backward},
    {"swiglu_forward", kF32, kBf16, run_swiglu_forward},
    {"swiglu_backward", kF32, kBf16, run_swiglu_backward},
    {"rope_forward", kF32, kBf16, run_rope_forward},
    {"rope_backward", kF32, kBf16, run_rope_backward},
    // attention
    {"causal_softmax_forward", kF32, kBf16, run_causal_softmax_forward},
    {"causal_softmax_backward", kF32, kBf16, run_causal_softmax_backward},
    {"attention_forward", kF32, kBf16, run_attention_forward},
    {"attention_delta", kF32, kBf16, run_attention_delta},
    {"attention_backward", kF32, kBf16, run_attention_backward},
    // LM head and embedding
    {"cross_entropy_max", kF32, kBf16, run_cross_entropy_max},
    {"cross_entropy_sums", kF32, kBf16, run_cross_entropy_sums},
    {"cross_entropy_loss", kF32, kF32, run_cross_entropy_loss},
    {"cross_entropy_backward", kF32, kBf16, run_cross_entropy_backward},
    {"embedding_forward", 0.0, kBf16, run_embedding_forward},  // rows copied: exact within a type
    {"embedding_backward", kF32, kBf16, run_embedding_backward},
    // optimizers and norms
    {"adamw_step", kF32, kF32, run_adamw_step},
    {"lamb_update", kF32, kF32, run_lamb_update},
    {"lars_update", kF32, kF32, run_lars_update},
    {"segment_norms", kF32, kF32, run_segment_norms},
    {"lamb_apply", kF32, kF32, run_lamb_apply},
    {"lars_apply", kF32, kF32, run_lars_apply},
    {"sum_of_squares", kF32, kF32, run_sum_of_squares},
    {"clip_factor", kF32, kF32, run_clip_factor},
};

constexpr std::uint32_t kSeed = 20240613;

std::vector<Output> run_op(const OpCase& op, Backend& backend, DType compute, bool fp8 = true) {
  OpRun run(backend, compute, kSeed, fp8);
  op.run(run);
  return run.finish();
}

// Compares every output of `op` on `other` (in `other_type`) with the CPU in `reference_type`.
// fp8 variants run where `other` has fp8 GEMMs (`fp8`), on both sides alike.
// `op` on `other` in `other_type` against the CPU in `reference_type`, every output within
// `tolerance` (or the output's own floor); the failure names each output that is not.
::testing::AssertionResult matches(const OpCase& op, Backend& other, DType other_type, DType reference_type,
                                   double tolerance, bool fp8 = true) {
  const std::vector<Output> reference = run_op(op, cpu_backend(), reference_type, fp8);
  const std::vector<Output> result = run_op(op, other, other_type, fp8);
  if (reference.empty()) return ::testing::AssertionFailure() << op.name << " collects no output";
  if (reference.size() != result.size()) return ::testing::AssertionFailure() << op.name << ": output counts differ";
  ::testing::AssertionResult verdict = ::testing::AssertionSuccess();
  bool failed = false;
  for (std::size_t i = 0; i < reference.size(); ++i) {
    for (double v : reference[i].values)
      if (std::isnan(v))
        return ::testing::AssertionFailure() << op.name << "." << reference[i].label
                                             << ": the reference left an element unwritten";
    const double difference = relative_difference(reference[i].values, result[i].values);
    const double allowed = std::max(tolerance, reference[i].tolerance_floor);
    if (!(difference <= allowed)) {
      if (!failed) verdict = ::testing::AssertionFailure();
      failed = true;
      verdict << op.name << "." << reference[i].label << " on " << other.name() << " in " << to_string(other_type)
              << " against cpu in " << to_string(reference_type) << ": relative difference " << difference << " > "
              << allowed << "; ";
    }
  }
  return verdict;
}

class BackendOps : public ::testing::TestWithParam<std::size_t> {
 protected:
  const OpCase& op() const { return kOps[GetParam()]; }
};

TEST_P(BackendOps, CpuBf16StorageMatchesCpuFp32) {
  EXPECT_TRUE(matches(op(), cpu_backend(), DType::bf16, DType::f32, op().bf16_tolerance));
}

TEST_P(BackendOps, CpuIsRepeatableBitForBit) {
  const std::vector<Output> first = run_op(op(), cpu_backend(), DType::f32);
  const std::vector<Output> second = run_op(op(), cpu_backend(), DType::f32);
  ASSERT_EQ(first.size(), second.size());
  for (std::size_t i = 0; i < first.size(); ++i) EXPECT_EQ(first[i].values, second[i].values) << first[i].label;
}

TEST_P(BackendOps, CudaMatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: the CUDA backend's " << op().name << " is not checked";
  const std::unique_ptr<Backend> cuda = make_cuda_backend(0);
  ASSERT_TRUE(cuda);
  const bool fp8 = cuda_device_has_fp8(0);
  if (!fp8) std::cout << "device 0 has no fp8 tensor cores: the fp8 GEMM variants are not checked\n";
  EXPECT_TRUE(matches(op(), *cuda, DType::f32, DType::f32, op().f32_tolerance, fp8));
  EXPECT_TRUE(matches(op(), *cuda, DType::bf16, DType::bf16, op().bf16_tolerance, fp8));
  // Deterministic on the device too: two runs give the same bits.
  const std::vector<Output> first = run_op(op(), *cuda, DType::f32, fp8),
                            second = run_op(op(), *cuda, DType::f32, fp8);
  for (std::size_t i = 0; i < first.size(); ++i) EXPECT_EQ(first[i].values, second[i].values) << first[i].label;
}

INSTANTIATE_TEST_SUITE_P(Table, BackendOps, ::testing::Range<std::size_t>(0, std::size(kOps)),
                         [](const ::testing::TestParamInfo<std::size_t>& info) {
                           return std::string(kOps[info.param].name);
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
  for (const OpCase& op : kOps) EXPECT_TRUE(listed.insert(op.name).second) << op.name << " is listed twice";
  for (const std::string& name : declared)
    EXPECT_TRUE(listed.count(name)) << "backend.hpp declares " << name << " but the op table does not test it";
  for (const std::string& name : listed)
    EXPECT_TRUE(declared.count(name)) << name << " is in the op table but not an op of backend.hpp";
}

TEST(BackendOpsTable, TolerancesStayWithinTheStatedBounds) {
  for (const OpCase& op : kOps) {
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
