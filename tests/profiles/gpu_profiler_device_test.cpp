// The GPU profiler on a real device (label gpu; skipped without one): a quick profile
// through the CUDA backend is plausible for any data-centre GPU tessel targets. The
// bounds are far below an A100's: they catch a profiler that times the wrong thing
// (host clocks, unsynchronised marks), not a slow GPU.
#include <gtest/gtest.h>

#include <algorithm>

#include "gpu/gpu_required.hpp"
#include "tessel/kernels/backend.hpp"
#include "tessel/profiles/gpu_profiler.hpp"

using namespace tessel::profiles;
namespace kernels = tessel::kernels;

TEST(GpuProfilerOnDevice, QuickProfileIsPlausible) {
  TESSEL_REQUIRE_GPU();
  std::unique_ptr<kernels::Backend> backend = kernels::make_cuda_backend(0);
  ASSERT_NE(backend, nullptr);
  GpuProfileOptions options;
  options.quick = true;
  options.cuda_device_name = kernels::cuda_device_name(0);
  options.cuda_memory_bytes = kernels::cuda_device_memory_bytes(0);
  const Profile profile = profile_gpu(*backend, options);
  EXPECT_EQ(profile.meta.at("cuda_device"), options.cuda_device_name);
  double best_bf16 = 0, best_fp32 = 0, triad_bytes_per_s = 0;
  for (const KernelSample& s : profile.kernels) {
    EXPECT_GT(s.seconds, 0) << to_string(s.op);
    if (s.op == KernelOp::gemm && s.precision == "bf16") best_bf16 = std::max(best_bf16, s.gemm_flops() / s.seconds);
    if (s.op == KernelOp::gemm && s.precision == "fp32") best_fp32 = std::max(best_fp32, s.gemm_flops() / s.seconds);
    if (s.op == KernelOp::elementwise && s.elements == gpu_stream_sizes(true).back()) {
      triad_bytes_per_s = double(s.elements) * streamed_bytes_per_element(s.op) / s.seconds;
    }
  }
  EXPECT_GT(best_bf16, 20e12) << "bf16 GEMMs on tensor cores";
  EXPECT_GT(best_bf16, best_fp32) << "bf16 beats fp32 (no TF32)";
  EXPECT_GT(triad_bytes_per_s, 300e9) << "HBM bandwidth";
  EXPECT_LT(triad_bytes_per_s, 10e12) << "beyond any HBM: the timing marks are wrong";
  const auto& uploads = profile.meta.at("host_to_device");
  ASSERT_FALSE(uploads.empty());
  const auto& largest = uploads.back();
  EXPECT_GT(largest.at("bytes").get<double>() / largest.at("seconds").get<double>(), 2e9) << "pinned uploads over PCIe";
}
