// The GPU profiler without a GPU: a fake Backend whose virtual clock each op advances by
// a known cost, so the shapes measured, the keys stored (the ones the CPU profiler and
// CostLookup use), each sample's time and the store round trip are all checked here.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <set>

#include "fake_timed_backend.hpp"
#include "tessel/core/error.hpp"
#include "tessel/profiles/cost_lookup.hpp"
#include "tessel/profiles/gpu_profiler.hpp"
#include "tessel/profiles/profile_store.hpp"

using namespace tessel::profiles;
using tessel::Json;
using tessel::testing::FakeTimedBackend;

namespace {

GpuProfileOptions quick_options(const std::string& cuda_name) {
  GpuProfileOptions options;
  options.quick = true;
  options.cuda_device_name = cuda_name;
  options.warmup = 1;
  options.repetitions = 3;
  return options;
}

// Within floating-point rounding of the virtual clock.
void expect_close(double measured, double expected, const std::string& what) {
  EXPECT_NEAR(measured, expected, 1e-9 * expected) << what;
}

}  // namespace

TEST(GpuProfilerShapes, QuickIsASubsetOfFullAndCoversTheTransformerBlock) {
  const auto full = gpu_gemm_shapes(false), quick = gpu_gemm_shapes(true);
  EXPECT_LT(quick.size(), full.size());
  for (const GemmShape& shape : quick) {
    EXPECT_NE(std::find(full.begin(), full.end(), shape), full.end()) << shape.m << "x" << shape.n << "x" << shape.k;
  }
  // QKV, projection, fc1 and fc2 of hidden 1024 at 2048 tokens.
  for (GemmShape block : {GemmShape{2048, 3072, 1024}, GemmShape{2048, 1024, 1024},
                             GemmShape{2048, 4096, 1024}, GemmShape{2048, 1024, 4096}}) {
    EXPECT_NE(std::find(quick.begin(), quick.end(), block), quick.end()) << block.m << "x" << block.n << "x" << block.k;
  }
  EXPECT_EQ(gpu_gemm_precisions(false), (std::vector<std::string>{"bf16", "fp16", "fp32", "tf32"}));
  EXPECT_EQ(gpu_gemm_precisions(true), (std::vector<std::string>{"bf16", "fp16", "fp32", "tf32", "fp8"}));
  // The largest streaming size lies far beyond a GPU's L2 cache (50 MiB): 4 bytes per element.
  EXPECT_GE(gpu_stream_sizes(true).back() * 4, std::int64_t(256) << 20);
  EXPECT_FALSE(gpu_attention_shapes(true).empty());
}

TEST(GpuProfilerShapes, CudaNamesMapToShippedProfiles) {
  EXPECT_EQ(shipped_device_for("NVIDIA H100 80GB HBM3"), "H100-SXM");
  EXPECT_EQ(shipped_device_for("NVIDIA H100 PCIe"), "");
  EXPECT_EQ(shipped_device_for("NVIDIA H200"), "H200");
  EXPECT_EQ(shipped_device_for("NVIDIA A100-SXM4-80GB"), "A100-SXM-80GB");
  EXPECT_EQ(shipped_device_for("NVIDIA A100-PCIE-40GB"), "");
  EXPECT_EQ(shipped_device_for("NVIDIA A100-PCIE-80GB"), "");
  EXPECT_EQ(shipped_device_for("NVIDIA A100-SXM4-40GB"), "A100-SXM-40GB");
  EXPECT_EQ(store_device_name("NVIDIA RTX A6000"), "NVIDIA-RTX-A6000");
  EXPECT_EQ(store_device_name(" a / b "), "a-b");
}

TEST(GpuProfiler, EverySampleTimesTheOpItNamesUnderTheCpuProfilersKeys) {
  FakeTimedBackend backend;
  const GpuProfileOptions options = quick_options("NVIDIA H100 80GB HBM3");
  const Profile profile = profile_gpu(backend, options);
  EXPECT_EQ(profile.device.name, "H100-SXM");
  EXPECT_EQ(profile.device.kind, "gpu");
  EXPECT_EQ(backend.live_device_blocks, 0u) << "every buffer is returned";
  EXPECT_EQ(backend.live_host_blocks, 0u);

  const auto shapes = gpu_gemm_shapes(true);
  std::vector<KernelSample> gemms, attention;
  std::set<std::pair<KernelOp, std::int64_t>> streaming;
  for (const KernelSample& s : profile.kernels) {
    EXPECT_EQ(s.device, "H100-SXM");
    EXPECT_EQ(s.source, SampleSource::measured);
    EXPECT_FALSE(s.host.empty());
    EXPECT_FALSE(s.date.empty());
    EXPECT_EQ(s.spread, 0.0);
    if (s.op == KernelOp::gemm) gemms.push_back(s);
    else if (s.op == KernelOp::attention) attention.push_back(s);
    else streaming.insert({s.op, s.elements});
  }
  ASSERT_EQ(gemms.size(), gpu_gemm_precisions(false).size() * shapes.size());
  for (std::size_t i = 0; i < gemms.size(); ++i) {
    const GemmShape& shape = shapes[i % shapes.size()];
    EXPECT_EQ(gemms[i].precision, gpu_gemm_precisions(false)[i / shapes.size()]);
    EXPECT_EQ(gemms[i].m, shape.m);
    EXPECT_EQ(gemms[i].n, shape.n);
    EXPECT_EQ(gemms[i].k, shape.k);
    expect_close(gemms[i].seconds, gemms[i].gemm_flops() / FakeTimedBackend::kFlopsPerS, "gemm");
  }
  // Warm-up and repetitions: each GEMM ran warmup + repetitions times.
  EXPECT_EQ(backend.calls["gemm"], int(gemms.size()) * (options.warmup + options.repetitions));

  ASSERT_EQ(attention.size(), 2 * gpu_attention_shapes(true).size());
  for (const KernelSample& s : attention) {
    EXPECT_TRUE(s.precision == "bf16" || s.precision == "fp16") << s.precision;
    EXPECT_GT(s.b * s.h * s.s * s.d, 0);
    expect_close(s.seconds, FakeTimedBackend::kAttentionForwardS, "attention forward");
  }
  for (std::int64_t elements : gpu_stream_sizes(true)) {
    for (KernelOp op : {KernelOp::elementwise, KernelOp::copy, KernelOp::norm, KernelOp::softmax, KernelOp::optimizer}) {
      EXPECT_TRUE(streaming.count({op, elements})) << to_string(op) << " " << elements;
    }
  }
  for (const KernelSample& s : profile.kernels) {
    if (s.op == KernelOp::elementwise) expect_close(s.seconds, 12.0 * s.elements / FakeTimedBackend::kStreamBytesPerS, "triad");
  }
}

TEST(GpuProfiler, ADeviceWithFp8AlsoMeasuresFp8Gemms) {
  FakeTimedBackend backend;
  GpuProfileOptions options = quick_options("NVIDIA H100 80GB HBM3");
  options.has_fp8 = true;
  const Profile profile = profile_gpu(backend, options);
  std::size_t fp8 = 0;
  for (const KernelSample& s : profile.kernels) fp8 += s.op == KernelOp::gemm && s.precision == "fp8";
  EXPECT_EQ(fp8, gpu_gemm_shapes(true).size());
  EXPECT_EQ(backend.live_device_blocks, 0u);
}

TEST(GpuProfiler, MetaNamesTheDeviceTheDateAndWhatWasNotMeasured) {
  FakeTimedBackend backend;
  const Profile profile = profile_gpu(backend, quick_options("NVIDIA H100 80GB HBM3"));
  const Json& meta = profile.meta;
  EXPECT_EQ(meta.at("source"), "measured");
  EXPECT_EQ(meta.at("backend"), "cuda");
  EXPECT_EQ(meta.at("cuda_device"), "NVIDIA H100 80GB HBM3");
  EXPECT_FALSE(meta.at("date").get<std::string>().empty());
  for (const char* missing : {"fp8", "nccl"}) EXPECT_TRUE(meta.at("not_measured").contains(missing)) << missing;
  EXPECT_FALSE(meta.at("not_measured").contains("tf32")) << "tf32 GEMMs are measured";
  ASSERT_EQ(meta.at("host_to_device").size(), gpu_copy_sizes_bytes(true).size());
  for (const Json& row : meta.at("host_to_device")) {
    expect_close(row.at("seconds").get<double>(), row.at("bytes").get<double>() / FakeTimedBackend::kCopyBytesPerS, "upload");
  }
  ASSERT_EQ(meta.at("device_to_host").size(), gpu_copy_sizes_bytes(true).size());
  ASSERT_EQ(meta.at("attention_backward").size(), 2 * gpu_attention_shapes(true).size());
  expect_close(meta.at("attention_backward")[0].at("seconds").get<double>(),
               FakeTimedBackend::kAttentionBackwardS + FakeTimedBackend::kDeltaS, "attention backward");
  EXPECT_EQ(meta.at("gelu_forward").size(), gpu_stream_sizes(true).size());
  // A shipped device keeps its datasheet peaks and gets the measured fraction of its bandwidth.
  const Profile datasheet = shipped_profile("H100-SXM");
  EXPECT_EQ(profile.device.peak_bf16_flops_per_s, datasheet.device.peak_bf16_flops_per_s);
  EXPECT_NEAR(profile.device.memory_efficiency,
              FakeTimedBackend::kStreamBytesPerS / datasheet.device.memory_bandwidth_bytes_per_s, 1e-9);
}

TEST(GpuProfiler, StoresAndTheCostLookupReadsTheMeasuredGemms) {
  FakeTimedBackend backend;
  const Profile profile = profile_gpu(backend, quick_options("NVIDIA H100 80GB HBM3"));
  const std::filesystem::path db =
      std::filesystem::temp_directory_path() / ("tessel_gpu_profiler_" + std::to_string(::getpid()) + ".db");
  {
    ProfileStore store(db.string());
    store.replace_profile(profile);
    const auto loaded = store.load("H100-SXM");
    ASSERT_TRUE(loaded.has_value());
    EXPECT_EQ(loaded->kernels, profile.kernels);
    EXPECT_EQ(loaded->meta, profile.meta);
    EXPECT_EQ(loaded->device, profile.device);
  }
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db.string() + suffix);
  // The planner's lookup is exact at a sampled size: 2048^3 in bf16 at the fake's rate.
  const CostLookup costs(profile, tessel::resolve_cluster("dgx-h100"), 1, 8);
  const double flops = 2.0 * 2048.0 * 2048.0 * 2048.0;
  EXPECT_NEAR(costs.gemm_seconds(flops, tessel::Precision::bf16), flops / FakeTimedBackend::kFlopsPerS,
              1e-6 * flops / FakeTimedBackend::kFlopsPerS);
}

TEST(GpuProfiler, UnknownDeviceGetsMeasuredPeaksAndNeedsItsMemorySize) {
  FakeTimedBackend backend;
  GpuProfileOptions options = quick_options("NVIDIA RTX A6000");
  EXPECT_THROW(profile_gpu(backend, options), tessel::Error);
  options.cuda_memory_bytes = 48e9;
  const Profile profile = profile_gpu(backend, options);
  EXPECT_EQ(profile.device.name, "NVIDIA-RTX-A6000");
  EXPECT_EQ(profile.device.memory_bytes, 48e9);
  EXPECT_NEAR(profile.device.peak_bf16_flops_per_s, FakeTimedBackend::kFlopsPerS, 1e-6 * FakeTimedBackend::kFlopsPerS);
  EXPECT_NEAR(profile.device.memory_bandwidth_bytes_per_s, FakeTimedBackend::kStreamBytesPerS, 1e-6 * FakeTimedBackend::kStreamBytesPerS);
  EXPECT_EQ(profile.device.memory_efficiency, 1.0);
}

TEST(GpuProfiler, CancelStopsWithAnError) {
  FakeTimedBackend backend;
  std::atomic<bool> cancel{true};
  GpuProfileOptions options = quick_options("NVIDIA H200");
  options.cancel = &cancel;
  EXPECT_THROW(profile_gpu(backend, options), tessel::Error);
  EXPECT_EQ(backend.calls["gemm"], 0);
}
