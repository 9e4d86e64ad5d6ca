// The CUDA backend on a device (label gpu): memory, streams, marks, and its element-wise
// and norm ops against the CPU reference backend (fp32 within 1e-5, bf16 and fp16 within
// 2e-2 relative; conversions and fills bit for bit, as both round with numeric.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tessel/core/error.hpp"
#include "gpu/gpu_required.hpp"
#include "tessel/kernels/backend.hpp"

#if defined(TESSEL_CUDA_BUILT)
#include "column_chunks.hpp"
#include "cuda_backend_impl.hpp"
#include "tessel/kernels/cuda/cuda_backend.hpp"
#endif

using namespace tessel;
using namespace tessel::kernels;

namespace {

constexpr Stream kCompute = Stream::compute;

// ---- tests on a device ----

// A tensor held twice with the same starting values: in host memory for the CPU
// backend, and in the CUDA backend's memory.
struct Twin {
  std::vector<std::byte> host;
  void* device = nullptr;
  DType type = DType::f32;
  std::int64_t n = 0;
  Ref cpu() { return {host.data(), type}; }
  Ref gpu() const { return {device, type}; }
};

class CudaBackendOnDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    TESSEL_REQUIRE_GPU();
    gpu_ = make_cuda_backend(0);
  }
  void TearDown() override {
    if (!gpu_) return;
    gpu_->synchronize();
    for (void* block : blocks_) gpu_->deallocate(block);
  }

  // n elements of any type, all bits zero.
  Twin zeros(std::int64_t n, DType type) {
    Twin t;
    t.type = type;
    t.n = n;
    t.host.assign(std::size_t(n) * element_bytes(type), std::byte{0});
    t.device = gpu_->allocate(t.host.size());
    blocks_.push_back(t.device);
    gpu_->upload(kCompute, t.device, t.host.data(), t.host.size());
    return t;
  }
  Twin twin(const std::vector<float>& values, DType type) {
    Twin t = zeros(std::int64_t(values.size()), type);
    cpu_backend().convert(kCompute, t.cpu(), f32(values.data()), t.n);
    gpu_->upload(kCompute, t.device, t.host.data(), t.host.size());
    return t;
  }
  Twin random_twin(std::int64_t n, DType type, float low = -2.0f, float high = 2.0f) {
    std::uniform_real_distribution<float> uniform(low, high);
    std::vector<float> values(static_cast<std::size_t>(n));
    for (float& v : values) v = uniform(rng_);
    return twin(values, type);
  }
  std::vector<std::byte> device_bytes(const Twin& t) {
    std::vector<std::byte> bytes(t.host.size());
    gpu_->download(kCompute, bytes.data(), t.device, bytes.size());
    gpu_->synchronize(kCompute);
    return bytes;
  }
  static std::vector<float> floats(const std::vector<std::byte>& bytes, DType type, std::int64_t n) {
    std::vector<float> values(static_cast<std::size_t>(n));
    cpu_backend().convert(kCompute, f32(values.data()), CRef{bytes.data(), type}, n);
    return values;
  }
  // Every element within `tolerance` relative to max(1, |CPU's value|); the first five
  // that are not, named.
  ::testing::AssertionResult close_to_cpu(const Twin& t, double tolerance, const std::string& what) {
    const auto want = floats(t.host, t.type, t.n), got = floats(device_bytes(t), t.type, t.n);
    ::testing::AssertionResult result = ::testing::AssertionSuccess();
    int reported = 0;
    for (std::size_t i = 0; i < want.size() && reported < 5; ++i) {
      const double bound = tolerance * std::max(1.0, std::abs(double(want[i])));
      if (std::abs(double(got[i]) - double(want[i])) <= bound) continue;
      if (reported++ == 0) result = ::testing::AssertionFailure();
      result << what << " (" << to_string(t.type) << ") element " << i << ": cuda " << got[i] << ", cpu " << want[i]
             << "; ";
    }
    return result;
  }
  static double tolerance(DType type) { return type == DType::f32 ? 1e-5 : 2e-2; }

  std::unique_ptr<Backend> gpu_;
  std::vector<void*> blocks_;
  std::mt19937 rng_{20260613};
  Backend& cpu_ = cpu_backend();
};

TEST_F(CudaBackendOnDevice, AllocatorHandsAFreedBlockBackForTheSameSize) {
  void* first = gpu_->allocate(1000);
  void* other = gpu_->allocate(1000);
  EXPECT_NE(first, other);
  gpu_->deallocate(first);
  gpu_->synchronize();  // every stream passed the free: the block may come back
  EXPECT_EQ(gpu_->allocate(1000), first);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(first) % 64, 0u);
  gpu_->deallocate(first);
  gpu_->deallocate(other);
}

TEST_F(CudaBackendOnDevice, UploadDownloadAndCopyRoundTrip) {
  const std::size_t n = 3001;
  auto* host = static_cast<float*>(gpu_->allocate_host(n * sizeof(float)));
  auto* back = static_cast<float*>(gpu_->allocate_host(n * sizeof(float)));
  for (std::size_t i = 0; i < n; ++i) host[i] = float(i) * 0.5f - 7.0f, back[i] = 0.0f;
  void* a = gpu_->allocate(n * sizeof(float));
  void* b = gpu_->allocate(n * sizeof(float));
  gpu_->upload(Stream::copy, a, host, n * sizeof(float));
  gpu_->wait_for(kCompute, Stream::copy);
  gpu_->copy(kCompute, b, a, n * sizeof(float));
  gpu_->download(kCompute, back, b, n * sizeof(float));
  gpu_->synchronize();
  EXPECT_EQ(std::memcmp(host, back, n * sizeof(float)), 0);
  gpu_->deallocate(a);
  gpu_->deallocate(b);
  gpu_->deallocate_host(host);
  gpu_->deallocate_host(back);
}

TEST_F(CudaBackendOnDevice, MarksAreOrderedInTime) {
  const std::int64_t n = std::int64_t(1) << 24;
  void* x = gpu_->allocate(std::size_t(n) * sizeof(float));
  gpu_->reset_origin();
  const TimeMark before = gpu_->mark(kCompute);
  for (int i = 0; i < 20; ++i) gpu_->fill(kCompute, f32(static_cast<float*>(x)), n, float(i));
  const TimeMark after = gpu_->mark(kCompute);
  EXPECT_NE(before, after);
  const double before_s = gpu_->elapsed_s(before), after_s = gpu_->elapsed_s(after);
  EXPECT_GE(before_s, 0.0);
  EXPECT_GT(after_s, before_s);
  gpu_->release_marks();
  EXPECT_EQ(gpu_->mark(kCompute), TimeMark(0));  // numbering starts again, events reused
  EXPECT_THROW(gpu_->elapsed_s(TimeMark(5)), Error);
  gpu_->release_marks();
  gpu_->deallocate(x);
}

TEST_F(CudaBackendOnDevice, FillAndConvertRoundExactlyAsTheCpu) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special{0.0f,    -0.0f,  1.0f,  -1.5f,       3.14159265f, 65504.0f, 65520.0f, 1e-8f,
                                   6e-8f,   1e-40f, inf,   -inf,        1e30f,       -2.5e-5f, 0.1f,     257.0f,
                                   1.00390625f, 1.01171875f, 33.3f, -65519.0f};
  for (DType from : {DType::f32, DType::bf16, DType::f16}) {
    for (DType to : {DType::f32, DType::bf16, DType::f16}) {
      Twin source = twin(special, from), destination = twin(std::vector<float>(special.size(), 0.0f), to);
      cpu_.convert(kCompute, destination.cpu(), source.cpu(), source.n);
      gpu_->convert(kCompute, destination.gpu(), source.gpu(), source.n);
      EXPECT_EQ(device_bytes(destination), destination.host) << to_string(from) << " -> " << to_string(to);
    }
  }
  for (DType type : {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32}) {
    Twin x = zeros(1001, type);
    cpu_.fill(kCompute, x.cpu(), x.n, 3.3f);
    gpu_->fill(kCompute, x.gpu(), x.n, 3.3f);
    EXPECT_EQ(device_bytes(x), x.host) << "fill " << to_string(type);
  }
}

TEST_F(CudaBackendOnDevice, AddScaleAndResidualMatchTheCpu) {
  const int rows = 37, cols = 129;
  const std::int64_t n = std::int64_t(rows) * cols;
  for (DType type : {DType::f32, DType::bf16, DType::f16}) {
    Twin a = random_twin(n, type), b = random_twin(n, DType::f32), out = random_twin(n, type);
    Twin bias = random_twin(cols, DType::bf16);
    cpu_.add(kCompute, out.cpu(), a.cpu(), b.cpu(), n);
    gpu_->add(kCompute, out.gpu(), a.gpu(), b.gpu(), n);
    EXPECT_TRUE(close_to_cpu(out, tolerance(type), "add"));
    cpu_.scale(kCompute, out.cpu(), n, 0.75f);
    gpu_->scale(kCompute, out.gpu(), n, 0.75f);
    EXPECT_TRUE(close_to_cpu(out, tolerance(type), "scale"));
    cpu_.residual(kCompute, out.cpu(), a.cpu(), b.cpu(), bias.cpu(), rows, cols);
    gpu_->residual(kCompute, out.gpu(), a.gpu(), b.gpu(), bias.gpu(), rows, cols);
    EXPECT_TRUE(close_to_cpu(out, tolerance(type), "residual with bias"));
    cpu_.residual(kCompute, out.cpu(), a.cpu(), b.cpu(), CRef{}, rows, cols);
    gpu_->residual(kCompute, out.gpu(), a.gpu(), b.gpu(), CRef{}, rows, cols);
    EXPECT_TRUE(close_to_cpu(out, tolerance(type), "residual"));
    cpu_.add_bias(kCompute, out.cpu(), bias.cpu(), rows, cols);
    gpu_->add_bias(kCompute, out.gpu(), bias.gpu(), rows, cols);
    EXPECT_TRUE(close_to_cpu(out, tolerance(type), "add_bias"));
    Twin transposed = random_twin(n, type);
    cpu_.transpose(kCompute, transposed.cpu(), a.cpu(), rows, cols);
    gpu_->transpose(kCompute, transposed.gpu(), a.gpu(), rows, cols);
    EXPECT_EQ(device_bytes(transposed), transposed.host) << "transpose " << to_string(type);
  }
}

TEST_F(CudaBackendOnDevice, ColumnSumsMatchTheCpuAndRepeatBitForBit) {
  const int rows = 1000, cols = 300;
  for (DType type : {DType::f32, DType::bf16}) {
    Twin dy = random_twin(std::int64_t(rows) * cols, type), gradient = random_twin(cols, DType::f32);
    cpu_.bias_gradient(kCompute, dy.cpu(), static_cast<float*>(gradient.cpu().data), rows, cols);
    const auto start = device_bytes(gradient);
    gpu_->bias_gradient(kCompute, dy.gpu(), static_cast<float*>(gradient.device), rows, cols);
    const auto once = device_bytes(gradient);
    gpu_->upload(kCompute, gradient.device, start.data(), start.size());
    gpu_->bias_gradient(kCompute, dy.gpu(), static_cast<float*>(gradient.device), rows, cols);
    EXPECT_EQ(device_bytes(gradient), once) << "bias_gradient is not deterministic";
    EXPECT_TRUE(close_to_cpu(gradient, 1e-4, "bias_gradient"));  // 1000 rows summed in another grouping

    const RowMap map{2, 3, 7};
    Twin table_gradient = random_twin(std::int64_t(9) * cols, DType::f32);
    cpu_.add_rows_backward(kCompute, dy.cpu(), static_cast<float*>(table_gradient.cpu().data), rows, cols, map);
    gpu_->add_rows_backward(kCompute, dy.gpu(), static_cast<float*>(table_gradient.device), rows, cols, map);
    EXPECT_EQ(device_bytes(table_gradient), table_gradient.host) << "add_rows_backward adds rows in the CPU's order";
  }
}

TEST_F(CudaBackendOnDevice, GeluAndSwigluMatchTheCpu) {
  const int rows = 19, f = 77;
  const std::int64_t n = std::int64_t(rows) * 2 * f;
  for (DType type : {DType::f32, DType::bf16}) {
    Twin x = random_twin(n, type, -4.0f, 4.0f), dy = random_twin(n, type), y = random_twin(n, type);
    Twin dx = random_twin(n, type);
    cpu_.gelu_forward(kCompute, x.cpu(), y.cpu(), n);
    gpu_->gelu_forward(kCompute, x.gpu(), y.gpu(), n);
    EXPECT_TRUE(close_to_cpu(y, tolerance(type), "gelu_forward"));
    cpu_.gelu_backward(kCompute, x.cpu(), dy.cpu(), dx.cpu(), n);
    gpu_->gelu_backward(kCompute, x.gpu(), dy.gpu(), dx.gpu(), n);
    EXPECT_TRUE(close_to_cpu(dx, tolerance(type), "gelu_backward"));
    cpu_.swiglu_forward(kCompute, x.cpu(), y.cpu(), rows, f);
    gpu_->swiglu_forward(kCompute, x.gpu(), y.gpu(), rows, f);
    EXPECT_TRUE(close_to_cpu(y, tolerance(type), "swiglu_forward"));
    cpu_.swiglu_backward(kCompute, x.cpu(), dy.cpu(), dx.cpu(), rows, f);
    gpu_->swiglu_backward(kCompute, x.gpu(), dy.gpu(), dx.gpu(), rows, f);
    EXPECT_TRUE(close_to_cpu(dx, tolerance(type), "swiglu_backward"));
  }
}

TEST_F(CudaBackendOnDevice, LayerNormMatchesTheCpuWholeAndInColumnBlocks) {
  const int rows = 45, cols = 300;
  const std::int64_t n = std::int64_t(rows) * cols;
  for (DType type : {DType::f32, DType::bf16}) {
    Twin x = random_twin(n, type), gamma = random_twin(cols, type), beta = random_twin(cols, type);
    Twin y = random_twin(n, type), dy = random_twin(n, type), dx = random_twin(n, type);
    Twin mean = random_twin(rows, DType::f32), rstd = random_twin(rows, DType::f32);
    Twin dgamma = random_twin(cols, DType::f32), dbeta = random_twin(cols, DType::f32);
    const auto fp = [](Twin& t, bool on_cpu) { return static_cast<float*>(on_cpu ? t.cpu().data : t.device); };
    for (Backend* b : {&cpu_, gpu_.get()}) {
      const bool on_cpu = b == &cpu_;
      const auto ref = [on_cpu](Twin& t) { return on_cpu ? t.cpu() : t.gpu(); };
      b->layer_norm_forward(kCompute, ref(x), ref(gamma), ref(beta), ref(y), fp(mean, on_cpu), fp(rstd, on_cpu), rows,
                            cols, 1e-5f);
      b->layer_norm_backward(kCompute, ref(dy), ref(x), ref(gamma), fp(mean, on_cpu), fp(rstd, on_cpu), ref(dx),
                             fp(dgamma, on_cpu), fp(dbeta, on_cpu), rows, cols, true);
    }
    EXPECT_TRUE(close_to_cpu(y, tolerance(type), "layer_norm_forward y"));
    EXPECT_TRUE(close_to_cpu(mean, 1e-5, "layer_norm_forward mean"));
    EXPECT_TRUE(close_to_cpu(rstd, 1e-5, "layer_norm_forward rstd"));
    EXPECT_TRUE(close_to_cpu(dx, tolerance(type), "layer_norm_backward dx"));
    EXPECT_TRUE(close_to_cpu(dgamma, 1e-4, "layer_norm_backward dgamma"));
    EXPECT_TRUE(close_to_cpu(dbeta, 1e-4, "layer_norm_backward dbeta"));

    // The same statistics and gradients through the column-block phases, one block.
    Twin sums = random_twin(rows, DType::f32), sums2 = random_twin(rows, DType::f32);
    for (Backend* b : {&cpu_, gpu_.get()}) {
      const bool on_cpu = b == &cpu_;
      const auto ref = [on_cpu](Twin& t) { return on_cpu ? t.cpu() : t.gpu(); };
      b->row_sums(kCompute, ref(x), fp(mean, on_cpu), rows, cols);
      b->finish_mean(kCompute, fp(mean, on_cpu), rows, cols);
      b->row_centered_square_sums(kCompute, ref(x), fp(mean, on_cpu), fp(rstd, on_cpu), rows, cols);
      b->finish_rstd(kCompute, fp(rstd, on_cpu), rows, cols, 1e-5f);
      b->layer_norm_apply(kCompute, ref(x), ref(gamma), ref(beta), fp(mean, on_cpu), fp(rstd, on_cpu), ref(y), rows,
                          cols);
      b->layer_norm_backward_partials(kCompute, ref(dy), ref(x), ref(gamma), fp(mean, on_cpu), fp(rstd, on_cpu),
                                      fp(dgamma, on_cpu), fp(dbeta, on_cpu), fp(sums, on_cpu), fp(sums2, on_cpu), rows,
                                      cols);
      b->layer_norm_backward_apply(kCompute, ref(dy), ref(x), ref(gamma), fp(mean, on_cpu), fp(rstd, on_cpu),
                                   fp(sums, on_cpu), fp(sums2, on_cpu), cols, ref(dx), rows, cols, false);
    }
    EXPECT_TRUE(close_to_cpu(mean, 1e-5, "row_sums / finish_mean"));
    EXPECT_TRUE(close_to_cpu(rstd, 1e-5, "row_centered_square_sums / finish_rstd"));
    EXPECT_TRUE(close_to_cpu(y, tolerance(type), "layer_norm_apply"));
    EXPECT_TRUE(close_to_cpu(sums, 1e-4, "layer_norm_backward_partials sum_dxhat"));
    EXPECT_TRUE(close_to_cpu(dx, tolerance(type), "layer_norm_backward_apply"));
    EXPECT_TRUE(close_to_cpu(dgamma, 1e-4, "layer_norm_backward_partials dgamma"));
  }
}

TEST_F(CudaBackendOnDevice, RmsNormMatchesTheCpu) {
  const int rows = 33, cols = 520;
  const std::int64_t n = std::int64_t(rows) * cols;
  for (DType type : {DType::f32, DType::bf16}) {
    Twin x = random_twin(n, type), gamma = random_twin(cols, type), y = random_twin(n, type);
    Twin dy = random_twin(n, type), dx = random_twin(n, type), rstd = random_twin(rows, DType::f32);
    Twin dgamma = random_twin(cols, DType::f32);
    cpu_.rms_norm_forward(kCompute, x.cpu(), gamma.cpu(), y.cpu(), static_cast<float*>(rstd.cpu().data), rows, cols,
                          1e-6f);
    gpu_->rms_norm_forward(kCompute, x.gpu(), gamma.gpu(), y.gpu(), static_cast<float*>(rstd.device), rows, cols, 1e-6f);
    EXPECT_TRUE(close_to_cpu(y, tolerance(type), "rms_norm_forward y"));
    EXPECT_TRUE(close_to_cpu(rstd, 1e-5, "rms_norm_forward rstd"));
    cpu_.rms_norm_backward(kCompute, dy.cpu(), x.cpu(), gamma.cpu(), static_cast<float*>(rstd.cpu().data), dx.cpu(),
                           static_cast<float*>(dgamma.cpu().data), rows, cols, false);
    gpu_->rms_norm_backward(kCompute, dy.gpu(), x.gpu(), gamma.gpu(), static_cast<float*>(rstd.device), dx.gpu(),
                            static_cast<float*>(dgamma.device), rows, cols, false);
    EXPECT_TRUE(close_to_cpu(dx, tolerance(type), "rms_norm_backward dx"));
    EXPECT_TRUE(close_to_cpu(dgamma, 1e-4, "rms_norm_backward dgamma"));
  }
}

// The fused residual + norm (one kernel per row) against the CPU, and against the
// device's own residual + norm bit for bit (the same sums in the same order), with a bias
// and without, in place. 10300 columns take the path that reads the row back from
// residual_out instead of keeping it in shared memory.
TEST_F(CudaBackendOnDevice, FusedResidualNormMatchesTheCpuAndTheUnfusedPairBitForBit) {
  for (const int cols : {300, 10300}) {
    const int rows = cols > 1000 ? 3 : 45;
    const std::int64_t n = std::int64_t(rows) * cols;
    for (DType type : {DType::f32, DType::bf16}) {
      for (const bool rms : {false, true}) {
        Twin x = random_twin(n, type), delta = random_twin(n, type), bias = random_twin(cols, type);
        Twin gamma = random_twin(cols, type), beta = random_twin(cols, type), y = zeros(n, type);
        Twin mean = zeros(rows, DType::f32), rstd = zeros(rows, DType::f32);
        Twin in_place = x, unfused_sum = zeros(n, type), unfused_y = zeros(n, type);
        Twin unfused_mean = zeros(rows, DType::f32), unfused_rstd = zeros(rows, DType::f32);
        in_place.device = gpu_->allocate(in_place.host.size());
        blocks_.push_back(in_place.device);
        gpu_->upload(kCompute, in_place.device, in_place.host.data(), in_place.host.size());
        const auto fp = [](Twin& t, bool on_cpu) { return static_cast<float*>(on_cpu ? t.cpu().data : t.device); };
        for (Backend* b : {&cpu_, gpu_.get()}) {
          const bool on_cpu = b == &cpu_;
          const auto ref = [on_cpu](Twin& t) { return on_cpu ? t.cpu() : t.gpu(); };
          if (rms) {
            b->residual_rms_norm_forward(kCompute, ref(in_place), ref(in_place), ref(delta), ref(bias), ref(gamma),
                                         ref(y), fp(rstd, on_cpu), rows, cols, 1e-5f);
          } else {
            b->residual_layer_norm_forward(kCompute, ref(in_place), ref(in_place), ref(delta), ref(bias), ref(gamma),
                                           ref(beta), ref(y), fp(mean, on_cpu), fp(rstd, on_cpu), rows, cols, 1e-5f);
          }
        }
        gpu_->residual(kCompute, unfused_sum.gpu(), x.gpu(), delta.gpu(), bias.gpu(), rows, cols);
        if (rms) {
          gpu_->rms_norm_forward(kCompute, unfused_sum.gpu(), gamma.gpu(), unfused_y.gpu(), fp(unfused_rstd, false),
                                 rows, cols, 1e-5f);
        } else {
          gpu_->layer_norm_forward(kCompute, unfused_sum.gpu(), gamma.gpu(), beta.gpu(), unfused_y.gpu(),
                                   fp(unfused_mean, false), fp(unfused_rstd, false), rows, cols, 1e-5f);
        }
        const std::string what = std::string(rms ? "residual_rms_norm_forward" : "residual_layer_norm_forward") +
                                 " over " + std::to_string(cols) + " columns";
        EXPECT_TRUE(close_to_cpu(in_place, tolerance(type), what + " residual_out"));
        EXPECT_TRUE(close_to_cpu(y, tolerance(type), what + " y"));
        EXPECT_TRUE(close_to_cpu(rstd, 1e-5, what + " rstd"));
        EXPECT_EQ(device_bytes(in_place), device_bytes(unfused_sum)) << what << " residual_out";
        EXPECT_EQ(device_bytes(y), device_bytes(unfused_y)) << what << " y";
        EXPECT_EQ(device_bytes(rstd), device_bytes(unfused_rstd)) << what << " rstd";
        if (!rms) {
          EXPECT_TRUE(close_to_cpu(mean, 1e-5, what + " mean"));
          EXPECT_EQ(device_bytes(mean), device_bytes(unfused_mean)) << what << " mean";
        }
      }
    }
  }
}

}  // namespace
