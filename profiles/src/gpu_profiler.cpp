// The GPU profiler (gpu_profiler.hpp): every time comes from the backend's timing marks (CUDA
// events), never the host clock, so launch latency and jitter stay out. Inputs are a fixed
// pseudo-random sequence, because a GPU draws less power and runs faster on zeros. Buffers are
// allocated once per family at the largest size, so the caching allocator keeps one block.
#include "tessel/profiles/gpu_profiler.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/profiles/measure.hpp"

namespace tessel::profiles {

namespace k = tessel::kernels;

// GPT sizes from 350M to 70B-class hidden widths, at a micro-batch's worth of tokens.
std::vector<GemmShape> gpu_gemm_shapes(bool quick) {
  if (quick) return transformer_gemm_shapes(std::vector{256, 512, 1024, 2048}, std::vector{1024, 2048}, std::vector{2048});
  return transformer_gemm_shapes(std::vector{256, 512, 1024, 2048, 4096, 8192}, std::vector{1024, 2048, 4096, 8192},
                                 std::vector{2048, 8192});
}

std::vector<GpuAttentionShape> gpu_attention_shapes(bool quick) {
  std::vector<GpuAttentionShape> shapes;
  for (int seq : {1024, 2048, 4096}) {
    if (quick && seq > 2048) break;
    for (int head_dim : {64, 128}) shapes.push_back({4, 2048 / head_dim, seq, head_dim});
  }
  return shapes;
}

std::vector<std::int64_t> gpu_stream_sizes(bool quick) {
  // The largest must lie far beyond the L2 cache (50 MiB on H100), or the bandwidth is the cache's.
  if (quick) return {1 << 20, 1 << 24, 1 << 26};
  return {1 << 16, 1 << 20, 1 << 24, 1 << 26, 1 << 28};
}

std::vector<std::int64_t> gpu_copy_sizes_bytes(bool quick) {
  if (quick) return {1 << 16, 1 << 20, 1 << 24, 1 << 26};
  return {1 << 12, 1 << 16, 1 << 20, 1 << 24, 1 << 26, 1 << 28};
}

std::vector<std::string> gpu_gemm_precisions(bool has_fp8) {
  std::vector<std::string> precisions{"bf16", "fp16", "fp32", "tf32"};
  if (has_fp8) precisions.push_back("fp8");
  return precisions;
}

std::string shipped_device_for(const std::string& cuda_device_name) {
  auto has = [&](const char* word) { return cuda_device_name.find(word) != std::string::npos; };
  if (has("H200")) return "H200";
  // H100 SXM reports "NVIDIA H100 80GB HBM3"; PCIe and NVL parts differ in clocks and bandwidth.
  if (has("H100") && (has("HBM3") || has("SXM")) && !has("PCIe") && !has("NVL")) return "H100-SXM";
  // A100 SXM parts report "NVIDIA A100-SXM4-80GB" / "-40GB"; PCIe parts "A100-PCIE-...".
  const bool pcie = has("PCIe") || has("PCIE");
  if (has("A100") && has("80GB") && !pcie) return "A100-SXM-80GB";
  if (has("A100") && has("40GB") && !pcie) return "A100-SXM-40GB";
  return "";
}

std::string store_device_name(const std::string& cuda_device_name) {
  std::string name;
  for (char c : cuda_device_name) {
    const bool separator = c == ' ' || c == '/' || c == '\t';
    if (separator && (name.empty() || name.back() == '-')) continue;
    name.push_back(separator ? '-' : c);
  }
  while (!name.empty() && name.back() == '-') name.pop_back();
  return name.empty() ? "cuda-device" : name;
}

namespace {

k::DType dtype_of(const std::string& precision) {
  if (precision == "bf16") return k::DType::bf16;
  if (precision == "fp16") return k::DType::f16;
  if (precision == "fp8") return k::DType::f8_e4m3;
  return k::DType::f32;  // fp32 and tf32
}

// One block of backend memory, returned when it goes out of scope.
class DeviceBuffer {
 public:
  DeviceBuffer(k::Backend& backend, std::int64_t elements, k::DType type)
      : backend_(backend), type_(type), pointer_(backend.allocate(std::size_t(elements) * k::element_bytes(type))) {}
  ~DeviceBuffer() { backend_.deallocate(pointer_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  k::Ref ref() const { return {pointer_, type_}; }
  float* f32() const { return static_cast<float*>(pointer_); }

 private:
  k::Backend& backend_;
  k::DType type_;
  void* pointer_;
};

class PinnedBuffer {
 public:
  PinnedBuffer(k::Backend& backend, std::size_t bytes) : backend_(backend), pointer_(backend.allocate_host(bytes)) {}
  ~PinnedBuffer() { backend_.deallocate_host(pointer_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* get() const { return pointer_; }

 private:
  k::Backend& backend_;
  void* pointer_;
};

constexpr tessel::Stream kCompute = tessel::Stream::compute;
constexpr tessel::Stream kCopy = tessel::Stream::copy;

class GpuProfiler {
 public:
  GpuProfiler(k::Backend& backend, const GpuProfileOptions& options)
      : backend_(backend), options_(options), host_(host_name()), date_(today_utc()), version_(tool_version()) {}

  Profile run();

 private:
  Measurement time(tessel::Stream stream, const std::function<void()>& op);
  void fill_random(k::Ref destination, std::int64_t elements);
  void progress(const std::string& what);
  KernelSample stamped(KernelSample sample, const Measurement& m) const;
  Json meta_row(Json row, const Measurement& m) const;
  void measure_gemms(const std::string& precision);
  void measure_attention(const std::string& precision);
  void measure_streaming(std::int64_t elements);
  void measure_copies();
  void describe_device();

  k::Backend& backend_;
  const GpuProfileOptions& options_;
  std::string host_, date_, version_;
  std::string device_name_;
  Profile profile_;
  Json attention_backward_ = Json::array(), gelu_ = Json::array();
  Json host_to_device_ = Json::array(), device_to_host_ = Json::array();
  double done_ = 0, total_ = 1;
};

Measurement GpuProfiler::time(tessel::Stream stream, const std::function<void()>& op) {
  for (int i = 0; i < options_.warmup; ++i) op();
  std::vector<k::TimeMark> starts, ends;
  for (int i = 0; i < std::max(1, options_.repetitions); ++i) {
    starts.push_back(backend_.mark(stream));
    op();
    ends.push_back(backend_.mark(stream));
  }
  backend_.synchronize(stream);
  std::vector<double> seconds;
  for (std::size_t i = 0; i < starts.size(); ++i) {
    seconds.push_back(backend_.elapsed_s(ends[i]) - backend_.elapsed_s(starts[i]));
  }
  backend_.release_marks();
  Measurement m = summarize(std::move(seconds));
  m.flagged = m.spread > MeasureOptions{}.noisy_spread;
  if (!(m.median_s > 0)) throw Error("profile --backend cuda: a kernel timed at zero seconds; the backend's marks are broken");
  return m;
}

// A fixed pseudo-random sequence in [-1, 1), staged through pinned memory in chunks and
// converted on the device to the buffer's element type.
void GpuProfiler::fill_random(k::Ref destination, std::int64_t elements) {
  const std::int64_t chunk = std::min<std::int64_t>(elements, 1 << 22);
  PinnedBuffer host(backend_, std::size_t(chunk) * sizeof(float));
  float* values = static_cast<float*>(host.get());
  std::uint32_t state = 12345u;
  for (std::int64_t i = 0; i < chunk; ++i) {
    state = state * 1664525u + 1013904223u;
    values[i] = float(state >> 8) / float(1u << 23) - 1.0f;
  }
  DeviceBuffer staging(backend_, chunk, k::DType::f32);
  for (std::int64_t first = 0; first < elements; first += chunk) {
    const std::int64_t n = std::min(chunk, elements - first);
    if (destination.type == k::DType::f32) {
      backend_.upload(kCompute, k::offset(destination, first).data, values, std::size_t(n) * sizeof(float));
    } else {
      backend_.upload(kCompute, staging.f32(), values, std::size_t(n) * sizeof(float));
      backend_.convert(kCompute, k::offset(destination, first), k::f32(staging.f32()), n);
    }
  }
  backend_.synchronize(kCompute);
}

void GpuProfiler::progress(const std::string& what) {
  if (options_.cancel && options_.cancel->load()) throw Error("profile: cancelled; nothing written");
  if (options_.on_progress) options_.on_progress(done_ / total_, what);
  done_ += 1;
}

KernelSample GpuProfiler::stamped(KernelSample sample, const Measurement& m) const {
  sample.seconds = m.median_s;
  sample.spread = m.spread;
  sample.flagged = m.flagged;
  sample.source = SampleSource::measured;
  sample.host = host_, sample.date = date_, sample.tool_version = version_;
  return sample;
}

Json GpuProfiler::meta_row(Json row, const Measurement& m) const {
  row["seconds"] = m.median_s;
  row["spread"] = m.spread;
  if (m.flagged) row["flagged"] = true;
  return row;
}

void GpuProfiler::measure_gemms(const std::string& precision) {
  const std::vector<GemmShape> shapes = gpu_gemm_shapes(options_.quick);
  std::int64_t a_elements = 0, b_elements = 0, c_elements = 0;
  for (const GemmShape& s : shapes) {
    a_elements = std::max(a_elements, std::int64_t(s.m) * s.k);
    b_elements = std::max(b_elements, std::int64_t(s.k) * s.n);
    c_elements = std::max(c_elements, std::int64_t(s.m) * s.n);
  }
  const k::DType type = dtype_of(precision);
  // fp8: cuBLASLt's one form, y = x w^T (B stored [n x k]), into bf16, as fp8 training runs it.
  const bool fp8 = type == k::DType::f8_e4m3;
  DeviceBuffer a(backend_, a_elements, type), b(backend_, b_elements, type);
  DeviceBuffer c(backend_, c_elements, fp8 ? k::DType::bf16 : type);
  fill_random(a.ref(), a_elements);
  fill_random(b.ref(), b_elements);
  for (const GemmShape& s : shapes) {
    progress(fmt::format("gemm {} {}x{}x{}", precision, s.m, s.n, s.k));
    k::Gemm gemm;
    gemm.m = s.m, gemm.n = s.n, gemm.k = s.k;
    gemm.a = a.ref(), gemm.b = b.ref(), gemm.c = c.ref();
    gemm.tf32 = precision == "tf32";
    gemm.transpose_b = fp8;
    const Measurement m = time(kCompute, [&] { backend_.gemm(kCompute, gemm); });
    profile_.kernels.push_back(stamped(KernelSample::gemm(device_name_, precision, s.m, s.n, s.k), m));
  }
}

// Forward as a kernel sample; the backward (attention_delta + attention_backward, what a
// training step runs per key block) in the meta, which has room for it.
void GpuProfiler::measure_attention(const std::string& precision) {
  const k::DType type = dtype_of(precision);
  for (const GpuAttentionShape& s : gpu_attention_shapes(options_.quick)) {
    progress(fmt::format("attention {} b{} h{} s{} d{}", precision, s.batch, s.heads, s.seq, s.head_dim));
    const int bh = s.batch * s.heads;
    const std::int64_t elements = std::int64_t(bh) * s.seq * s.head_dim, rows = std::int64_t(bh) * s.seq;
    DeviceBuffer q(backend_, elements, type), kk(backend_, elements, type), v(backend_, elements, type);
    DeviceBuffer out(backend_, elements, type), dout(backend_, elements, type);
    DeviceBuffer dq(backend_, elements, type), dk(backend_, elements, type), dv(backend_, elements, type);
    DeviceBuffer lse(backend_, rows, k::DType::f32), delta(backend_, rows, k::DType::f32);
    for (const DeviceBuffer* buffer : {&q, &kk, &v, &dout}) fill_random(buffer->ref(), elements);
    k::Attention forward;
    forward.bh = bh, forward.q_len = forward.kv_len = s.seq, forward.head_dim = s.head_dim;
    forward.scale = 1.0f / std::sqrt(float(s.head_dim));
    forward.q = q.ref(), forward.k = kk.ref(), forward.v = v.ref(), forward.out = out.ref(), forward.lse = lse.f32();
    const Measurement fm = time(kCompute, [&] { backend_.attention_forward(kCompute, forward); });
    KernelSample sample;
    sample.device = device_name_, sample.op = KernelOp::attention, sample.precision = precision;
    sample.b = s.batch, sample.h = s.heads, sample.s = s.seq, sample.d = s.head_dim;
    profile_.kernels.push_back(stamped(sample, fm));

    k::AttentionGrad backward;
    backward.bh = bh, backward.q_len = backward.kv_len = s.seq, backward.head_dim = s.head_dim;
    backward.scale = forward.scale;
    backward.q = q.ref(), backward.k = kk.ref(), backward.v = v.ref(), backward.dout = dout.ref();
    backward.lse = lse.f32(), backward.delta = delta.f32();
    backward.dq = dq.ref(), backward.dk = dk.ref(), backward.dv = dv.ref();
    backend_.fill(kCompute, dq.ref(), elements, 0.0f);
    const Measurement bm = time(kCompute, [&] {
      backend_.attention_delta(kCompute, dout.ref(), out.ref(), delta.f32(), rows, s.head_dim);
      backend_.attention_backward(kCompute, backward);
    });
    attention_backward_.push_back(meta_row(
        Json{{"precision", precision}, {"b", s.batch}, {"h", s.heads}, {"s", s.seq}, {"d", s.head_dim}}, bm));
  }
}

// The CPU profiler's streaming kernels, on fp32 rows of 1024 as there, plus GELU and the
// AdamW step the planner prices as memory-bound time.
void GpuProfiler::measure_streaming(std::int64_t elements) {
  constexpr int kCols = 1024;
  const int rows = int(elements / kCols);
  DeviceBuffer a(backend_, elements, k::DType::f32), b(backend_, elements, k::DType::f32);
  DeviceBuffer c(backend_, elements, k::DType::f32), d(backend_, elements, k::DType::f32);
  DeviceBuffer gamma(backend_, kCols, k::DType::f32), beta(backend_, kCols, k::DType::f32);
  DeviceBuffer mean(backend_, rows, k::DType::f32), rstd(backend_, rows, k::DType::f32);
  fill_random(a.ref(), elements);
  fill_random(b.ref(), elements);
  fill_random(gamma.ref(), kCols);
  fill_random(beta.ref(), kCols);
  backend_.fill(kCompute, c.ref(), elements, 0.0f);
  backend_.fill(kCompute, d.ref(), elements, 0.0f);
  auto record = [&](KernelOp op, const std::function<void()>& kernel) {
    progress(fmt::format("{} {} elements", to_string(op), elements));
    profile_.kernels.push_back(stamped(KernelSample::streaming(device_name_, op, elements), time(kCompute, kernel)));
  };
  record(KernelOp::elementwise, [&] { backend_.add(kCompute, c.ref(), a.ref(), b.ref(), elements); });
  record(KernelOp::copy, [&] { backend_.copy(kCompute, c.f32(), a.f32(), std::size_t(elements) * sizeof(float)); });
  record(KernelOp::norm, [&] {
    backend_.layer_norm_forward(kCompute, a.ref(), gamma.ref(), beta.ref(), c.ref(), mean.f32(), rstd.f32(), rows, kCols,
                                1e-5f);
  });
  // first_row = kCols - 1: every query sees every key, so whole rows are normalised.
  record(KernelOp::softmax,
         [&] { backend_.causal_softmax_forward(kCompute, a.ref(), c.ref(), 1, rows, kCols, kCols - 1, 1.0f); });
  backend_.fill(kCompute, b.ref(), elements, 0.0f);  // the second moment starts at zero, as in training
  record(KernelOp::optimizer, [&] {
    backend_.adamw_step(kCompute, c.f32(), a.f32(), d.f32(), b.f32(), elements, kernels::AdamWParams{}, nullptr);
  });
  progress(fmt::format("gelu {} elements", elements));
  const Measurement gelu = time(kCompute, [&] { backend_.gelu_forward(kCompute, a.ref(), c.ref(), elements); });
  gelu_.push_back(meta_row(Json{{"precision", "fp32"}, {"elements", elements}}, gelu));
}

// Host <-> device through pinned memory (allocate_host), on the copy stream, both ways.
void GpuProfiler::measure_copies() {
  const std::vector<std::int64_t> sizes = gpu_copy_sizes_bytes(options_.quick);
  const std::int64_t largest = *std::max_element(sizes.begin(), sizes.end());
  PinnedBuffer host(backend_, std::size_t(largest));
  DeviceBuffer device(backend_, largest / 4, k::DType::f32);
  for (std::int64_t bytes : sizes) {
    progress(fmt::format("host to device {} bytes", bytes));
    const Measurement up = time(kCopy, [&] { backend_.upload(kCopy, device.f32(), host.get(), std::size_t(bytes)); });
    host_to_device_.push_back(meta_row(Json{{"bytes", bytes}, {"pinned", true}}, up));
    progress(fmt::format("device to host {} bytes", bytes));
    const Measurement down =
        time(kCopy, [&] { backend_.download(kCopy, host.get(), device.f32(), std::size_t(bytes)); });
    device_to_host_.push_back(meta_row(Json{{"bytes", bytes}, {"pinned", true}}, down));
  }
}

Profile GpuProfiler::run() {
  const std::string shipped = shipped_device_for(options_.cuda_device_name);
  if (!shipped.empty()) {
    profile_ = shipped_profile(shipped);
    profile_.kernels.clear();
    profile_.links.clear();
  } else {
    if (!(options_.cuda_memory_bytes > 0)) {
      throw Error(fmt::format("profile --backend cuda: no shipped profile matches '{}' and its memory size is unknown",
                              options_.cuda_device_name));
    }
    profile_.device.name = store_device_name(options_.cuda_device_name);
    profile_.device.kind = "gpu";
    profile_.device.memory_bytes = options_.cuda_memory_bytes;
    profile_.device.sources = Json::object();
    profile_.device.sources["memory_bytes"] = "measured: cudaGetDeviceProperties' totalGlobalMem";
  }
  device_name_ = profile_.device.name;
  const auto precisions = gpu_gemm_precisions(options_.has_fp8);
  const double copy_points = 2.0 * double(gpu_copy_sizes_bytes(options_.quick).size());
  total_ = double(precisions.size() * gpu_gemm_shapes(options_.quick).size()) +
           2.0 * double(gpu_attention_shapes(options_.quick).size()) +
           6.0 * double(gpu_stream_sizes(options_.quick).size()) + copy_points;
  for (const std::string& precision : precisions) measure_gemms(precision);
  for (const std::string precision : {"bf16", "fp16"}) measure_attention(precision);
  for (std::int64_t elements : gpu_stream_sizes(options_.quick)) measure_streaming(elements);
  measure_copies();
  describe_device();
  if (options_.on_progress) options_.on_progress(1.0, "done");
  profile_.meta = Json{{"source", "measured"},
                       {"backend", "cuda"},
                       {"backend_name", std::string(backend_.name())},
                       {"host", host_},
                       {"date", date_},
                       {"quick", options_.quick},
                       {"cuda_device", options_.cuda_device_name},
                       {"cuda_device_index", options_.device_index},
                       {"attention_backward", attention_backward_},
                       {"gelu_forward", gelu_},
                       {"host_to_device", host_to_device_},
                       {"device_to_host", device_to_host_},
                       {"not_measured",
                        {{"fp8", options_.has_fp8 ? "measured (GEMMs only; fp8 attention is not in the Backend)"
                                                  : "this device has no fp8 tensor cores (compute capability < 8.9)"},
                         {"nccl", "NCCL collectives: the next issue's work (import nccl-tests results meanwhile)"}}}};
  return profile_;
}

// Peaks and bandwidth: a shipped device keeps its datasheet peaks and gets the measured
// fraction of its datasheet bandwidth; a device with no shipped profile gets the best
// measured rates, each named as such in `sources`.
void GpuProfiler::describe_device() {
  DeviceSpec& device = profile_.device;
  const bool datasheet = !shipped_device_for(options_.cuda_device_name).empty();
  device.sources["gemm"] = fmt::format("measured: backend {} on {} ({}) {}", backend_.name(),
                                       options_.cuda_device_name, host_, date_);
  if (!datasheet) {
    auto best = [&](const std::string& precision) {
      double rate = 0;
      for (const KernelSample& s : profile_.kernels) {
        if (s.op == KernelOp::gemm && s.precision == precision) rate = std::max(rate, s.gemm_flops() / s.seconds);
      }
      return rate;
    };
    device.peak_fp32_flops_per_s = best("fp32");
    device.peak_tf32_flops_per_s = best("tf32");
    device.peak_bf16_flops_per_s = best("bf16");
    device.peak_fp16_flops_per_s = best("fp16");
    device.peak_fp8_flops_per_s = options_.has_fp8 ? best("fp8") : 0.0;  // 0: fp8 training refused
    device.sources["peak_flops_per_s"] =
        "measured: the best GEMM rate per precision (no datasheet profile for this device)";
  }
  const std::int64_t largest = gpu_stream_sizes(options_.quick).back();
  for (const KernelSample& s : profile_.kernels) {
    if (s.op != KernelOp::elementwise || s.elements != largest) continue;
    const double measured = double(s.elements) * streamed_bytes_per_element(s.op) / s.seconds;
    if (datasheet && device.memory_bandwidth_bytes_per_s > 0) {
      device.memory_efficiency = std::min(1.0, measured / device.memory_bandwidth_bytes_per_s);
      device.sources["memory_efficiency"] =
          fmt::format("measured: triad over {} fp32 elements reached {:.0f} GB/s of the datasheet's {:.0f} GB/s",
                      s.elements, measured / 1e9, device.memory_bandwidth_bytes_per_s / 1e9);
    } else {
      device.memory_bandwidth_bytes_per_s = measured;
      device.memory_efficiency = 1.0;
      device.sources["memory_bandwidth_bytes_per_s"] =
          fmt::format("measured: triad over {} fp32 elements on {} {}", s.elements, host_, date_);
      device.sources["memory_efficiency"] = "1: the bandwidth above is already the achieved one";
    }
  }
}

}  // namespace

Profile profile_gpu(kernels::Backend& backend, const GpuProfileOptions& options) {
  return GpuProfiler(backend, options).run();
}

}  // namespace tessel::profiles
