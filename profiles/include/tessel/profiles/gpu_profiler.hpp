// `tessel profile --backend cuda`: measures one GPU into a profile entirely through the
// kernels::Backend interface and its timing marks, so it holds no CUDA code and is tested with
// a fake Backend. Each point is warmed up, then timed as `repetitions` mark pairs around one op;
// the median and spread are kept. What is measured, under which keys: docs/GPU.md, "The GPU
// profiler".
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessel/kernels/backend.hpp"
#include "tessel/profiles/measure.hpp"
#include "tessel/profiles/profile.hpp"

namespace tessel::profiles {

struct GpuAttentionShape {
  int batch = 0, heads = 0, seq = 0, head_dim = 0;
  bool operator==(const GpuAttentionShape&) const = default;
};

// The points measured, in the order they are measured.
std::vector<GemmShape> gpu_gemm_shapes(bool quick);
std::vector<GpuAttentionShape> gpu_attention_shapes(bool quick);
std::vector<std::int64_t> gpu_stream_sizes(bool quick);
std::vector<std::int64_t> gpu_copy_sizes_bytes(bool quick);
// The GEMM precisions measured, as the store names them (fp32 GEMMs run without TF32).
// bf16, fp16, fp32 (exact), tf32 (fp32 inputs on TF32 tensor cores), and fp8 (e4m3
// inputs, bf16 output) where the device has it.
std::vector<std::string> gpu_gemm_precisions(bool has_fp8);

// The shipped datasheet profile a CUDA device name (e.g. "NVIDIA H100 80GB HBM3")
// corresponds to (A100-SXM-80GB, A100-SXM-40GB, H100-SXM, H200), or "" when none does.
std::string shipped_device_for(const std::string& cuda_device_name);
// A device name for the store from a CUDA device name when no shipped one matches:
// spaces and slashes become '-' ("NVIDIA-RTX-A6000").
std::string store_device_name(const std::string& cuda_device_name);

struct GpuProfileOptions {
  bool quick = false;
  int device_index = 0;
  std::string cuda_device_name;        // what CUDA calls the device
  double cuda_memory_bytes = 0;        // the device's memory, for devices with no shipped profile
  bool has_fp8 = false;                // compute capability 8.9 or later: fp8 GEMM curves too
  int warmup = 2;
  int repetitions = 10;
  // (fraction done, what is being measured)
  std::function<void(double, const std::string&)> on_progress;
  const std::atomic<bool>* cancel = nullptr;
};

// Measures `backend` (a GPU backend, or a test double) and returns the measured profile:
// source "measured", the date, the host and the CUDA device name in its meta and in
// every sample's provenance. Throws tessel::Error when cancelled.
Profile profile_gpu(kernels::Backend& backend, const GpuProfileOptions& options);

}  // namespace tessel::profiles
