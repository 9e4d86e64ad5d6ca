// The CUDA backend's GEMMs (every transpose, epilogue, batched) and attention ops (the
// materialised softmax, attention_delta, the fused forward/backward on cuDNN where it takes
// the shape, else tessel's flash kernel) against the CPU backend fed the same bytes; each
// GPU op run twice must give the same bits. Skipped without a CUDA device (fp8 GEMMs also
// without fp8 tensor cores); the tolerances and why are below.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpu/gpu_required.hpp"
#include "tessel/core/error.hpp"
#include "tessel/kernels/backend.hpp"
#include "tessel/kernels/numeric.hpp"

// Tolerances: fp32 to 1e-5, bf16 to 2e-2, relative to max(1, |reference|); the GEMM
// precision modes have their own bounds: TF32 1e-2 (10 mantissa bits per input, and the device may
// truncate where the CPU rounds), fp8 inputs 1e-3 into fp32 (fp8 tensor cores add partial
// sums at reduced precision between promotions), 2e-2 into bf16.

using namespace tessel;
using namespace tessel::kernels;

namespace {

constexpr Stream kStream = Stream::compute;
constexpr float kInfinity = std::numeric_limits<float>::infinity();

double tolerance(DType type) { return type == DType::f32 ? 1e-5 : 2e-2; }

std::vector<std::uint8_t> encode(const std::vector<float>& values, DType type) {
  std::vector<std::uint8_t> bytes(values.size() * element_bytes(type));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (type == DType::f32) {
      std::memcpy(bytes.data() + 4 * i, &values[i], 4);
    } else if (type == DType::f8_e4m3) {
      bytes[i] = numeric::to_f8_e4m3(values[i]);
    } else {
      const std::uint16_t half = type == DType::bf16 ? numeric::to_bf16(values[i]) : numeric::to_f16(values[i]);
      std::memcpy(bytes.data() + 2 * i, &half, 2);
    }
  }
  return bytes;
}

std::vector<float> decode(const std::vector<std::uint8_t>& bytes, DType type) {
  std::vector<float> values(bytes.size() / element_bytes(type));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (type == DType::f32) {
      std::memcpy(&values[i], bytes.data() + 4 * i, 4);
    } else if (type == DType::f8_e4m3) {
      values[i] = numeric::from_f8_e4m3(bytes[i]);
    } else {
      std::uint16_t half;
      std::memcpy(&half, bytes.data() + 2 * i, 2);
      values[i] = type == DType::bf16 ? numeric::from_bf16(half) : numeric::from_f16(half);
    }
  }
  return values;
}

// One tensor on both backends: host bytes the CPU reference works on, and a device
// copy, both starting from the same initial bytes.
class Pair {
 public:
  Pair(Backend& gpu, DType type, const std::vector<float>& values)
      : gpu_(gpu), type_(type), initial_(encode(values, type)), host_(initial_) {
    device_ = gpu_.allocate(std::max<std::size_t>(initial_.size(), 1));
    reset_gpu();
  }
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;
  ~Pair() { gpu_.deallocate(device_); }

  Ref cpu() { return {host_.data(), type_}; }
  Ref gpu() { return {device_, type_}; }
  float* cpu_f32() { return reinterpret_cast<float*>(host_.data()); }
  float* gpu_f32() { return static_cast<float*>(device_); }
  void reset_gpu() {
    gpu_.upload(kStream, device_, initial_.data(), initial_.size());
    gpu_.synchronize(kStream);
  }
  std::vector<std::uint8_t> gpu_bytes() {
    std::vector<std::uint8_t> bytes(initial_.size());
    gpu_.synchronize();
    gpu_.download(kStream, bytes.data(), device_, bytes.size());
    gpu_.synchronize(kStream);
    return bytes;
  }
  std::vector<float> gpu_values() { return decode(gpu_bytes(), type_); }
  std::vector<float> cpu_values() const { return decode(host_, type_); }

 private:
  Backend& gpu_;
  DType type_;
  std::vector<std::uint8_t> initial_, host_;
  void* device_ = nullptr;
};

std::vector<float> random_values(std::mt19937& rng, std::int64_t n, float low = -1.0f, float high = 1.0f) {
  std::uniform_real_distribution<float> uniform(low, high);
  std::vector<float> values(static_cast<std::size_t>(n));
  for (float& v : values) v = uniform(rng);
  return values;
}

// Several checks of one case folded into one result, every failure's message kept.
class Checks {
 public:
  void add(const ::testing::AssertionResult& check) {
    if (check) return;
    failed_ = true;
    messages_ += check.message() + std::string("\n");
  }
  ::testing::AssertionResult result() const {
    return failed_ ? ::testing::AssertionFailure() << messages_ : ::testing::AssertionSuccess();
  }

 private:
  bool failed_ = false;
  std::string messages_;
};

// Element by element; infinities must match exactly. The first three that differ, named.
::testing::AssertionResult close_to(const std::vector<float>& got, const std::vector<float>& want, double tol,
                                    const std::string& what) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << what << ": " << got.size() << " elements, the CPU has " << want.size();
  }
  int failures = 0;
  std::string first;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool close = std::isinf(want[i])
                           ? got[i] == want[i]
                           : std::abs(double(got[i]) - want[i]) <= tol * std::max(1.0, std::abs(double(want[i])));
    if (!close && failures++ < 3) {
      first += " [" + std::to_string(i) + "]: gpu " + std::to_string(got[i]) + ", cpu " + std::to_string(want[i]);
    }
  }
  if (failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << failures << " of " << got.size() << " elements differ;"
                                       << first;
}

// Runs `op` on the GPU twice from the same inputs (resetting `outputs` in between): the
// same bits from both runs.
template <typename Op>
::testing::AssertionResult repeats_bits(const std::vector<Pair*>& outputs, const Op& op, const std::string& what) {
  std::vector<std::vector<std::uint8_t>> first;
  for (Pair* p : outputs) p->reset_gpu();
  op();
  for (Pair* p : outputs) first.push_back(p->gpu_bytes());
  for (Pair* p : outputs) p->reset_gpu();
  op();
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i]->gpu_bytes() != first[i]) {
      return ::testing::AssertionFailure() << what << ": output " << i << " differs between runs";
    }
  }
  return ::testing::AssertionSuccess();
}

class CudaGemmAttentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TESSEL_REQUIRE_GPU();
    gpu_ = make_cuda_backend(0);
    ASSERT_NE(gpu_, nullptr);
  }
  Backend& gpu() { return *gpu_; }
  std::unique_ptr<Backend> gpu_;
  std::mt19937 rng_{1234};
};

// ---- GEMM ----

struct GemmCase {
  DType input = DType::f32, output = DType::f32;
  bool transpose_a = false, transpose_b = false;
  int m = 0, n = 0, k = 0;
  float beta = 0.0f;
  Epilogue epilogue = Epilogue::none;
  bool tf32 = false;
  std::string name() const {
    return std::string(to_string(input)) + "->" + std::string(to_string(output)) +
           " ta=" + std::to_string(transpose_a) + " tb=" + std::to_string(transpose_b) + " " + std::to_string(m) + "x" +
           std::to_string(n) + "x" + std::to_string(k) + " beta=" + std::to_string(beta) +
           " epilogue=" + std::to_string(int(epilogue)) + (tf32 ? " tf32" : "");
  }
  double tolerance() const {
    if (input == DType::f8_e4m3) return output == DType::f32 ? 1e-3 : 2e-2;
    if (input == DType::f32 && tf32) return 1e-2;
    return ::tolerance(input);
  }
};

::testing::AssertionResult gemm_matches_cpu(Backend& gpu, std::mt19937& rng, const GemmCase& c) {
  Checks checks;
  const std::int64_t mn = std::int64_t(c.m) * c.n;
  Pair a(gpu, c.input, random_values(rng, std::int64_t(c.m) * c.k)),
      b(gpu, c.input, random_values(rng, std::int64_t(c.k) * c.n));
  // fp8 GEMMs take their bias in the output's type.
  const DType bias_type = c.input == DType::f8_e4m3 ? c.output : c.input;
  Pair out(gpu, c.output, random_values(rng, mn)), bias(gpu, bias_type, random_values(rng, c.n));
  Pair aux(gpu, c.output, random_values(rng, mn, -2.0f, 2.0f)), bias_gradient(gpu, DType::f32, random_values(rng, c.n));
  const auto make = [&](bool on_gpu) {
    Gemm g;
    g.transpose_a = c.transpose_a, g.transpose_b = c.transpose_b, g.m = c.m, g.n = c.n, g.k = c.k;
    g.alpha = 0.75f, g.beta = c.beta, g.epilogue = c.epilogue, g.tf32 = c.tf32;
    g.a = on_gpu ? a.gpu() : a.cpu(), g.b = on_gpu ? b.gpu() : b.cpu(), g.c = on_gpu ? out.gpu() : out.cpu();
    g.bias = on_gpu ? bias.gpu() : bias.cpu(), g.aux = on_gpu ? aux.gpu() : aux.cpu();
    g.bias_gradient = on_gpu ? bias_gradient.gpu_f32() : bias_gradient.cpu_f32();
    return g;
  };
  cpu_backend().gemm(kStream, make(false));
  const Gemm on_gpu = make(true);
  checks.add(repeats_bits(
      {&out, &aux, &bias_gradient}, [&] { gpu.gemm(kStream, on_gpu); }, c.name()));
  const double tol = c.tolerance();
  checks.add(close_to(out.gpu_values(), out.cpu_values(), tol, c.name() + " C"));
  if (c.epilogue == Epilogue::bias_gelu) checks.add(close_to(aux.gpu_values(), aux.cpu_values(), tol, c.name() + " aux"));
  if (c.epilogue == Epilogue::bias_gradient || c.epilogue == Epilogue::dgelu_bias_gradient)
    checks.add(close_to(bias_gradient.gpu_values(), bias_gradient.cpu_values(), tol, c.name() + " bias gradient"));
  return checks.result();
}

TEST_F(CudaGemmAttentionTest, GemmEveryTransposeAndEpilogueMatchesCpu) {
  struct Shape {
    int m, n, k;
  };
  // n = 40: cuBLASLt's aux leading dimension can be used; n = 20 and odd sizes take the
  // hand-made epilogues where cuBLASLt refuses.
  for (const Shape shape : {Shape{48, 40, 72}, Shape{33, 20, 17}})
    for (const DType input : {DType::f32, DType::bf16, DType::f16})
      for (const bool f32_output : {false, true}) {
        if (f32_output && input == DType::f32) continue;  // f32 inputs have one output type
        const DType output = f32_output ? DType::f32 : input;
        for (const bool ta : {false, true})
          for (const bool tb : {false, true})
            for (const Epilogue epilogue : {Epilogue::none, Epilogue::bias, Epilogue::bias_gelu,
                                            Epilogue::bias_gradient, Epilogue::dgelu_bias_gradient}) {
              if (epilogue == Epilogue::bias_gradient && tb) continue;  // it sums the rows of a plain B
              for (const float beta : {0.0f, 0.5f}) {
                if (epilogue == Epilogue::dgelu_bias_gradient && beta != 0.0f) continue;  // overwrites C
                EXPECT_TRUE(gemm_matches_cpu(gpu(), rng_, {input, output, ta, tb, shape.m, shape.n, shape.k, beta, epilogue}));
              }
            }
      }
}

TEST_F(CudaGemmAttentionTest, GemmWithEmptySumScalesC) {
  EXPECT_TRUE(gemm_matches_cpu(gpu(), rng_, {DType::f32, DType::f32, false, false, 8, 8, 0, 0.5f, Epilogue::none}));
  EXPECT_TRUE(gemm_matches_cpu(gpu(), rng_, {DType::bf16, DType::bf16, false, false, 8, 8, 0, 0.0f, Epilogue::bias_gelu}));
}

TEST_F(CudaGemmAttentionTest, GemmInTf32MatchesCpu) {
  for (const bool ta : {false, true})
    for (const bool tb : {false, true})
      for (const Epilogue epilogue : {Epilogue::none, Epilogue::bias, Epilogue::bias_gelu}) {
        GemmCase c{DType::f32, DType::f32, ta, tb, 48, 40, 72, 0.5f, epilogue};
        c.tf32 = true;
        EXPECT_TRUE(gemm_matches_cpu(gpu(), rng_, c));
      }
}

TEST_F(CudaGemmAttentionTest, GemmWithF8InputsMatchesCpu) {
  if (!cuda_device_has_fp8(0)) GTEST_SKIP() << "device 0 has no fp8 tensor cores (compute capability < 8.9)";
  for (const DType output : {DType::f32, DType::bf16})
    for (const Epilogue epilogue : {Epilogue::none, Epilogue::bias, Epilogue::bias_gelu})
      for (const float beta : {0.0f, 0.5f})
        EXPECT_TRUE(gemm_matches_cpu(gpu(), rng_, {DType::f8_e4m3, output, false, true, 48, 40, 64, beta, epilogue}));
}

// Every fp8 call cuBLASLt cannot run is refused with tessel::Error, and nothing else.
TEST_F(CudaGemmAttentionTest, GemmWithF8InputsRefusesWhatCuBLASLtCannotRun) {
  const int m = 16, n = 16, k = 32;
  Pair a(gpu(), DType::f8_e4m3, random_values(rng_, m * k)), b(gpu(), DType::f8_e4m3, random_values(rng_, k * n));
  Pair c(gpu(), DType::f32, random_values(rng_, m * n)), c8(gpu(), DType::f8_e4m3, random_values(rng_, m * n));
  Gemm g;
  g.m = m, g.n = n, g.k = k, g.transpose_b = true;
  g.a = a.gpu(), g.b = b.gpu(), g.c = c.gpu();
  if (!cuda_device_has_fp8(0)) {
    EXPECT_THROW(gpu().gemm(kStream, g), Error) << "a device without fp8 tensor cores runs no fp8 GEMM";
    return;
  }
  EXPECT_NO_THROW(gpu().gemm(kStream, g));  // the TN form
  gpu().synchronize();
  Gemm not_tn = g;
  not_tn.transpose_b = false;
  EXPECT_THROW(gpu().gemm(kStream, not_tn), Error);
  not_tn.transpose_a = true, not_tn.transpose_b = true;
  EXPECT_THROW(gpu().gemm(kStream, not_tn), Error);
  Gemm odd_k = g;
  odd_k.k = 24;
  EXPECT_THROW(gpu().gemm(kStream, odd_k), Error);
  Gemm f8_output = g;
  f8_output.c = c8.gpu();
  EXPECT_THROW(gpu().gemm(kStream, f8_output), Error);
}

TEST_F(CudaGemmAttentionTest, BatchedGemmMatchesCpu) {
  for (const DType type : {DType::f32, DType::bf16})
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        const int batch = 3, m = 24, n = 40, k = 32;
        const std::int64_t stride_a = m * k + 16, stride_b = k * n + 8, stride_c = m * n + 24;
        Pair a(gpu(), type, random_values(rng_, stride_a * batch)),
            b(gpu(), type, random_values(rng_, stride_b * batch));
        Pair c(gpu(), type, random_values(rng_, stride_c * batch));
        const auto make = [&](bool on_gpu) {
          BatchedGemm g;
          g.gemm.transpose_a = ta, g.gemm.transpose_b = tb, g.gemm.m = m, g.gemm.n = n, g.gemm.k = k;
          g.gemm.alpha = 1.25f, g.gemm.beta = 0.5f;
          g.gemm.a = on_gpu ? a.gpu() : a.cpu(), g.gemm.b = on_gpu ? b.gpu() : b.cpu(),
          g.gemm.c = on_gpu ? c.gpu() : c.cpu();
          g.batch = batch, g.stride_a = stride_a, g.stride_b = stride_b, g.stride_c = stride_c;
          return g;
        };
        cpu_backend().gemm_batched(kStream, make(false));
        const BatchedGemm on_gpu = make(true);
        const std::string what =
            "batched " + std::string(to_string(type)) + " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb);
        EXPECT_TRUE(repeats_bits(
            {&c}, [&] { gpu().gemm_batched(kStream, on_gpu); }, what));
        EXPECT_TRUE(close_to(c.gpu_values(), c.cpu_values(), tolerance(type), what));
      }
}

// ---- materialised attention ----

TEST_F(CudaGemmAttentionTest, CausalSoftmaxForwardAndBackwardMatchCpu) {
  for (const DType type : {DType::f32, DType::bf16}) {
    const int batch = 3, rows = 7, cols = 300, first_row = 290;  // rows longer than a block's threads
    const std::int64_t n = std::int64_t(batch) * rows * cols;
    Pair scores(gpu(), type, random_values(rng_, n, -4.0f, 4.0f)), probs(gpu(), type, random_values(rng_, n));
    Pair dprobs(gpu(), type, random_values(rng_, n)), dscores(gpu(), type, random_values(rng_, n));
    const float scale = 0.37f;
    cpu_backend().causal_softmax_forward(kStream, scores.cpu(), probs.cpu(), batch, rows, cols, first_row, scale);
    const std::string what = "softmax " + std::string(to_string(type));
    EXPECT_TRUE(repeats_bits(
        {&probs},
        [&] { gpu().causal_softmax_forward(kStream, scores.gpu(), probs.gpu(), batch, rows, cols, first_row, scale); },
        what + " forward"));
    EXPECT_TRUE(close_to(probs.gpu_values(), probs.cpu_values(), tolerance(type), what + " forward"));
    // The backward from the CPU's probabilities on both sides.
    Pair same_probs(gpu(), type, probs.cpu_values());
    cpu_backend().causal_softmax_backward(kStream, same_probs.cpu(), dprobs.cpu(), dscores.cpu(), batch * rows, cols,
                                          scale);
    EXPECT_TRUE(repeats_bits(
        {&dscores},
        [&] {
          gpu().causal_softmax_backward(kStream, same_probs.gpu(), dprobs.gpu(), dscores.gpu(), batch * rows, cols,
                                        scale);
        },
        what + " backward"));
    EXPECT_TRUE(close_to(dscores.gpu_values(), dscores.cpu_values(), tolerance(type), what + " backward"));
  }
}

TEST_F(CudaGemmAttentionTest, AttentionDeltaMatchesCpu) {
  for (const DType type : {DType::f32, DType::bf16}) {
    const std::int64_t rows = 333;
    const int head_dim = 64;
    Pair dout(gpu(), type, random_values(rng_, rows * head_dim)),
        out(gpu(), type, random_values(rng_, rows * head_dim));
    Pair delta(gpu(), DType::f32, random_values(rng_, rows));
    cpu_backend().attention_delta(kStream, dout.cpu(), out.cpu(), delta.cpu_f32(), rows, head_dim);
    const std::string what = "attention_delta " + std::string(to_string(type));
    EXPECT_TRUE(repeats_bits(
        {&delta}, [&] { gpu().attention_delta(kStream, dout.gpu(), out.gpu(), delta.gpu_f32(), rows, head_dim); },
        what));
    EXPECT_TRUE(close_to(delta.gpu_values(), delta.cpu_values(), tolerance(type), what));
  }
}

// ---- fused attention ----

// One key/value block of a ring: its position and length.
struct KeyBlock {
  int kv_first, kv_len;
};

// Forward over `blocks` in order (merging after the first), then the backward of each
// block (dq accumulated over all, dk/dv written), on both backends; compares out, lse,
// dq, dk and dv, and expects each GPU call to repeat its bits.
::testing::AssertionResult fused_attention_matches_cpu(Backend& gpu, std::mt19937& rng, DType type, int head_dim,
                                                       int q_len, int q_first, const std::vector<KeyBlock>& blocks,
                                                       bool accumulate_kv) {
  Checks checks;
  const int bh = 3;
  const float scale = 1.0f / std::sqrt(float(head_dim));
  const std::int64_t q_size = std::int64_t(bh) * q_len * head_dim;
  const std::string what = std::string(to_string(type)) + " d=" + std::to_string(head_dim) +
                           " q_len=" + std::to_string(q_len) + " q_first=" + std::to_string(q_first) +
                           " blocks=" + std::to_string(blocks.size());
  Pair q(gpu, type, random_values(rng, q_size)), out(gpu, type, random_values(rng, q_size));
  Pair lse(gpu, DType::f32, random_values(rng, std::int64_t(bh) * q_len));
  Pair dout(gpu, type, random_values(rng, q_size)), dq(gpu, type, random_values(rng, q_size));
  std::vector<std::unique_ptr<Pair>> k, v, dk, dv;
  for (const KeyBlock& block : blocks) {
    const std::int64_t kv_size = std::int64_t(bh) * block.kv_len * head_dim;
    k.push_back(std::make_unique<Pair>(gpu, type, random_values(rng, kv_size)));
    v.push_back(std::make_unique<Pair>(gpu, type, random_values(rng, kv_size)));
    dk.push_back(std::make_unique<Pair>(gpu, type, random_values(rng, kv_size)));
    dv.push_back(std::make_unique<Pair>(gpu, type, random_values(rng, kv_size)));
  }
  const auto forward_args = [&](std::size_t i, bool on_gpu) {
    Attention a;
    a.bh = bh, a.q_len = q_len, a.kv_len = blocks[i].kv_len, a.head_dim = head_dim;
    a.q_first = q_first, a.kv_first = blocks[i].kv_first, a.scale = scale, a.merge = i > 0;
    a.q = on_gpu ? q.gpu() : q.cpu(), a.k = on_gpu ? k[i]->gpu() : k[i]->cpu(),
    a.v = on_gpu ? v[i]->gpu() : v[i]->cpu();
    a.out = on_gpu ? out.gpu() : out.cpu(), a.lse = on_gpu ? lse.gpu_f32() : lse.cpu_f32();
    return a;
  };
  for (std::size_t i = 0; i < blocks.size(); ++i) cpu_backend().attention_forward(kStream, forward_args(i, false));
  checks.add(repeats_bits(
      {&out, &lse},
      [&] {
        for (std::size_t i = 0; i < blocks.size(); ++i) gpu.attention_forward(kStream, forward_args(i, true));
      },
      what + " forward"));
  checks.add(close_to(out.gpu_values(), out.cpu_values(), tolerance(type), what + " out"));
  checks.add(close_to(lse.gpu_values(), lse.cpu_values(), tolerance(type), what + " lse"));

  // The backward from the CPU's out and lse on both sides, so it is checked on its own.
  Pair cpu_out(gpu, type, out.cpu_values()), cpu_lse(gpu, DType::f32, lse.cpu_values());
  Pair delta(gpu, DType::f32, std::vector<float>(std::size_t(bh) * q_len, 0.0f));
  cpu_backend().attention_delta(kStream, dout.cpu(), cpu_out.cpu(), delta.cpu_f32(), std::int64_t(bh) * q_len,
                                head_dim);
  Pair same_delta(gpu, DType::f32, delta.cpu_values());
  const auto backward_args = [&](std::size_t i, bool on_gpu) {
    AttentionGrad g;
    g.bh = bh, g.q_len = q_len, g.kv_len = blocks[i].kv_len, g.head_dim = head_dim;
    g.q_first = q_first, g.kv_first = blocks[i].kv_first, g.scale = scale, g.accumulate_kv = accumulate_kv;
    g.q = on_gpu ? q.gpu() : q.cpu(), g.k = on_gpu ? k[i]->gpu() : k[i]->cpu(),
    g.v = on_gpu ? v[i]->gpu() : v[i]->cpu();
    g.dout = on_gpu ? dout.gpu() : dout.cpu();
    g.out = on_gpu ? cpu_out.gpu() : cpu_out.cpu();  // delta's out, for cuDNN's backward
    g.lse = on_gpu ? cpu_lse.gpu_f32() : cpu_lse.cpu_f32(),
    g.delta = on_gpu ? same_delta.gpu_f32() : same_delta.cpu_f32();
    g.dq = on_gpu ? dq.gpu() : dq.cpu(), g.dk = on_gpu ? dk[i]->gpu() : dk[i]->cpu(),
    g.dv = on_gpu ? dv[i]->gpu() : dv[i]->cpu();
    return g;
  };
  for (std::size_t i = 0; i < blocks.size(); ++i) cpu_backend().attention_backward(kStream, backward_args(i, false));
  std::vector<Pair*> gradients{&dq};
  for (std::size_t i = 0; i < blocks.size(); ++i) gradients.push_back(dk[i].get()), gradients.push_back(dv[i].get());
  checks.add(repeats_bits(
      gradients,
      [&] {
        for (std::size_t i = 0; i < blocks.size(); ++i) gpu.attention_backward(kStream, backward_args(i, true));
      },
      what + " backward"));
  checks.add(close_to(dq.gpu_values(), dq.cpu_values(), tolerance(type), what + " dq"));
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    checks.add(close_to(dk[i]->gpu_values(), dk[i]->cpu_values(), tolerance(type), what + " dk " + std::to_string(i)));
    checks.add(close_to(dv[i]->gpu_values(), dv[i]->cpu_values(), tolerance(type), what + " dv " + std::to_string(i)));
  }
  return checks.result();
}

TEST_F(CudaGemmAttentionTest, FusedAttentionOneBlockMatchesCpu) {
  for (const DType type : {DType::f32, DType::bf16, DType::f16})
    for (const int head_dim : {32, 64, 128})
      EXPECT_TRUE(fused_attention_matches_cpu(gpu(), rng_, type, head_dim, 100, 0, {{0, 100}}, false));
}

TEST_F(CudaGemmAttentionTest, FusedAttentionMergesTwoKeyBlocksWithOffsets) {
  // A ring rank holding queries 70..139 sees an earlier block 0..69 and its own 70..139.
  for (const DType type : {DType::f32, DType::bf16})
    for (const int head_dim : {32, 64, 128})
      EXPECT_TRUE(fused_attention_matches_cpu(gpu(), rng_, type, head_dim, 70, 70, {{0, 70}, {70, 70}}, true));
}

TEST_F(CudaGemmAttentionTest, FusedAttentionRowsThatSeeNoKey) {
  // Keys from position 40 on: queries 0..39 see none of them (out 0, lse -inf), then a
  // merge with a later block that no query sees leaves everything as it was.
  for (const DType type : {DType::f32, DType::bf16})
    EXPECT_TRUE(fused_attention_matches_cpu(gpu(), rng_, type, 64, 90, 0, {{40, 50}, {200, 33}}, false));
}

// TESSEL_ATTENTION set for one scope, then as it was.
class ScopedAttentionPath {
 public:
  explicit ScopedAttentionPath(const char* value) {
    if (const char* saved = std::getenv(kName)) saved_ = saved, had_ = true;
    setenv(kName, value, 1);
  }
  ~ScopedAttentionPath() {
    if (had_) setenv(kName, saved_.c_str(), 1);
    else unsetenv(kName);
  }

 private:
  static constexpr const char* kName = "TESSEL_ATTENTION";
  std::string saved_;
  bool had_ = false;
};

// cuDNN's fused attention (kernels/src/cuda/cudnn_sdpa.cpp) on GPT-2-like shapes: it must
// run where the library loads (the forward from sm_80, the backward on sm_90) and match
// the CPU; tessel's flash kernel, asked for by TESSEL_ATTENTION=flash, too.
TEST_F(CudaGemmAttentionTest, CudnnAttentionRunsWhereItLoadsAndMatchesCpu) {
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  for (const DType type : {DType::bf16, DType::f16})
    for (const int head_dim : {64, 128})
      for (const int seq : {128, 1024}) {
        ASSERT_TRUE(fused_attention_matches_cpu(gpu(), rng_, type, head_dim, seq, 0, {{0, seq}}, false));
        const std::string note = cuda_attention_path_note();
        if (note.find("dlopen(") != std::string::npos) GTEST_SKIP() << "no cuDNN 9 to load: " << note;
        EXPECT_NE(note.find("forward: cudnn"), std::string::npos) << note;
        if (major == 9) {
          EXPECT_NE(note.find("backward: cudnn"), std::string::npos) << note;
        }
      }
  ScopedAttentionPath flash("flash");
  EXPECT_TRUE(fused_attention_matches_cpu(gpu(), rng_, DType::bf16, 64, 128, 0, {{0, 128}}, false));
  EXPECT_EQ(cuda_attention_path_note(),
            "forward: flash (TESSEL_ATTENTION=flash); backward: flash (TESSEL_ATTENTION=flash)");
}

TEST_F(CudaGemmAttentionTest, FusedAttentionRefusesOtherHeadDims) {
  ScopedAttentionPath flash("flash");  // cuDNN takes 48; tessel's kernel does not
  Pair q(gpu(), DType::bf16, random_values(rng_, 48 * 4)), lse(gpu(), DType::f32, random_values(rng_, 4));
  Attention a;
  a.bh = 1, a.q_len = 4, a.kv_len = 4, a.head_dim = 48;
  a.q = q.gpu(), a.k = q.gpu(), a.v = q.gpu(), a.out = q.gpu(), a.lse = lse.gpu_f32();
  EXPECT_THROW(gpu().attention_forward(kStream, a), tessel::Error);
}

}  // namespace
