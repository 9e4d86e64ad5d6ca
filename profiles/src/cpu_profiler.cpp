#include "tessel/profiles/cpu_profiler.hpp"

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include <Eigen/Dense>
#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/core/subprocess.hpp"
#include "tessel/profiles/measure.hpp"

namespace tessel::profiles {

CpuInfo detect_cpu() {
  CpuInfo info;
  info.cores = int(std::max(1u, std::thread::hardware_concurrency()));
  // The CPUs this process may run on (a container or taskset may allow fewer than the
  // machine has): the ranks mpirun starts from here share those.
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0 && CPU_COUNT(&allowed) > 0) {
    info.cores = std::min(info.cores, int(CPU_COUNT(&allowed)));
  }
  std::ifstream in("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && info.model.empty()) info.model = value;
    if (key == "cpu MHz" && info.ghz == 0) info.ghz = std::atof(value.c_str()) / 1000.0;
    if (key == "flags" && flags.empty()) flags = " " + value + " ";
  }
  if (info.ghz <= 0) info.ghz = 2.0;  // no frequency reported: a conservative guess, named in the source
  auto has = [&](const char* flag) { return flags.find(std::string(" ") + flag + " ") != std::string::npos; };
  // Two FMA ports per core, 2 FLOP per lane per FMA: 512-bit 64, 256-bit 32 fp32 FLOP/cycle.
  if (has("avx512f")) info.isa = "avx512", info.fp32_flops_per_cycle = 64;
  else if (has("avx2") && has("fma")) info.isa = "avx2", info.fp32_flops_per_cycle = 32;
  else info.isa = "sse", info.fp32_flops_per_cycle = 8;
  return info;
}

namespace {

// CPU-sized models: squares up to 2048, blocks of hidden 128 to 768.
std::vector<GemmShape> gemm_shapes(bool quick) {
  if (quick) return transformer_gemm_shapes(std::vector{32, 64, 128, 256, 512}, std::vector{128, 256}, std::vector{256});
  return transformer_gemm_shapes(std::vector{32, 64, 128, 256, 512, 1024, 2048}, std::vector{128, 256, 512, 768},
                                 std::vector{256, 1024});
}

// The clock /proc/cpuinfo reports may sit below the turbo clock the GEMMs ran at: the
// device's peak is then the best rate measured, so no efficiency exceeds 1.
void raise_peak_to_best_gemm_rate(Profile& profile, const CpuInfo& cpu, double peak, const std::string& host) {
  DeviceSpec& device = profile.device;
  double best_rate = 0;
  for (const KernelSample& sample : profile.kernels) {
    if (sample.op == KernelOp::gemm) best_rate = std::max(best_rate, sample.gemm_flops() / sample.seconds);
  }
  if (best_rate <= peak) return;
  device.peak_fp32_flops_per_s = device.peak_tf32_flops_per_s = best_rate;
  device.peak_bf16_flops_per_s = device.peak_fp16_flops_per_s = best_rate;
  device.sources["peak_flops_per_s"] =
      fmt::format("measured: the best GEMM rate on {} ({:.1f} GFLOP/s), above the {:.1f} GFLOP/s that /proc/cpuinfo "
                  "implies for one core ({} at {:.2f} GHz x {} fp32 FLOP/cycle, {}): the core runs above its "
                  "reported clock",
                  host, best_rate / 1e9, peak / 1e9, cpu.model, cpu.ghz, cpu.fp32_flops_per_cycle, cpu.isa);
}

// Streaming bandwidth measured by the triad on the largest arrays (beyond the caches).
void set_bandwidth_from_triad(Profile& profile, std::int64_t largest_elements, const std::string& host,
                              const std::string& date) {
  DeviceSpec& device = profile.device;
  for (const KernelSample& sample : profile.kernels) {
    if (sample.op == KernelOp::elementwise && sample.elements == largest_elements) {
      device.memory_bandwidth_bytes_per_s = sample.elements * streamed_bytes_per_element(sample.op) / sample.seconds;
      device.memory_efficiency = 1.0;
      device.sources["memory_bandwidth_bytes_per_s"] =
          fmt::format("measured: triad over {} fp32 elements on {} {}", sample.elements, host, date);
      device.sources["memory_efficiency"] = "1: the bandwidth above is already the achieved one";
    }
  }
}

// MPI collectives over loopback on `ranks` ranks, through tessel-mpi-bench under mpirun.
void measure_mpi_links(Profile& profile, const CpuProfileOptions& options, int ranks, const std::string& host,
                       const std::string& date, const std::string& version) {
  const std::string command = fmt::format(
      "mpirun --allow-run-as-root --oversubscribe -np {} '{}' --max-bytes {} --repetitions {} --min-seconds {} 2>&1",
      ranks, options.mpi_bench, options.quick ? 16 << 20 : 256 << 20, options.quick ? 3 : 5,
      options.quick ? 0.005 : 0.02);
  int status = 0;
  const std::string output = run_command(command, status);
  if (status != 0) throw Error(fmt::format("profile: mpirun failed (status {}):\n{}", status, output));
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '{') continue;
    Json row = Json::parse(line);
    row["fabric"] = options.fabric;
    row["source"] = "measured";
    LinkSample sample = link_sample_from_json(row, "tessel-mpi-bench");
    sample.host = host, sample.date = date, sample.tool_version = version;
    profile.links.push_back(sample);
  }
}

}  // namespace

Profile profile_cpu(const CpuProfileOptions& options) {
  const CpuInfo cpu = detect_cpu();
  const std::string host = host_name(), date = today_utc(), version = tool_version();
  Profile profile = shipped_profile("local-cpu");
  profile.kernels.clear();
  profile.links.clear();
  DeviceSpec& device = profile.device;
  const double peak = cpu.peak_fp32_flops_per_s_per_core();
  device.peak_fp32_flops_per_s = device.peak_tf32_flops_per_s = peak;
  device.peak_bf16_flops_per_s = device.peak_fp16_flops_per_s = peak;
  device.sources["peak_flops_per_s"] =
      fmt::format("estimate for one rank (one core) from /proc/cpuinfo on {}: {} at {:.2f} GHz x {} fp32 FLOP/cycle ({}); "
                  "CPU kernels compute in fp32 whatever the storage precision",
                  host, cpu.model, cpu.ghz, cpu.fp32_flops_per_cycle, cpu.isa);
  device.sources["gemm"] = fmt::format("measured: Eigen, one thread, on {} {}", host, date);
  device.cores = cpu.cores;
  device.sources["cores"] = fmt::format(
      "measured: the logical CPUs this process may run on, on {} {}; ranks beyond them share cores", host, date);

  const MeasureOptions timing = options.quick ? MeasureOptions{1, 3, 0.01, 0.2} : MeasureOptions{1, 5, 0.05, 0.2};
  const std::vector<GemmShape> shapes = gemm_shapes(options.quick);
  // The largest arrays (3 x 128 MiB for the triad) must lie beyond the last-level
  // cache, or the "memory" bandwidth is the cache's.
  std::vector<std::int64_t> stream_sizes{1 << 16, 1 << 20, 1 << 25};
  if (!options.quick) stream_sizes = {1 << 16, 1 << 20, 1 << 22, 1 << 24, 1 << 25};
  const int max_ranks = options.max_ranks > 0 ? options.max_ranks : std::max(2, cpu.cores);
  const int mpi_runs = options.mpi_bench.empty() ? 0 : max_ranks - 1;
  const double total = double(shapes.size() + 4 * stream_sizes.size() + 4 * mpi_runs);
  double done = 0;
  auto progress = [&](const std::string& what) {
    if (options.cancel && options.cancel->load()) throw Error("profile: cancelled; nothing written");
    if (options.on_progress) options.on_progress(done / total, what);
  };
  auto stamp = [&](KernelSample& sample, const Measurement& m) {
    sample.device = device.name;
    sample.seconds = m.median_s;
    sample.spread = m.spread;
    sample.flagged = m.flagged;
    sample.source = SampleSource::measured;
    sample.host = host, sample.date = date, sample.tool_version = version;
  };

  // ---- GEMMs: fp32, one thread, C = A B with fresh random inputs ----
  for (const GemmShape& shape : shapes) {
    progress(fmt::format("gemm {}x{}x{}", shape.m, shape.n, shape.k));
    Eigen::MatrixXf a = Eigen::MatrixXf::Random(shape.m, shape.k);
    Eigen::MatrixXf b = Eigen::MatrixXf::Random(shape.k, shape.n);
    Eigen::MatrixXf c(shape.m, shape.n);
    const Measurement m = measure([&] { c.noalias() = a * b; }, timing);
    if (!std::isfinite(c(0, 0))) throw Error("profile: GEMM produced a non-finite value");
    KernelSample sample = KernelSample::gemm(device.name, "fp32", shape.m, shape.n, shape.k);
    stamp(sample, m);
    profile.kernels.push_back(sample);
    done += 1;
  }

  // ---- streaming kernels over fp32 arrays ----
  for (std::int64_t elements : stream_sizes) {
    Eigen::ArrayXf a = Eigen::ArrayXf::Random(elements), b = Eigen::ArrayXf::Random(elements), c(elements);
    const float scale = 0.5f;
    auto record = [&](KernelOp op, const std::function<void()>& kernel) {
      progress(fmt::format("{} {} elements", to_string(op), elements));
      KernelSample sample = KernelSample::streaming(device.name, op, elements);
      stamp(sample, measure(kernel, timing));
      profile.kernels.push_back(sample);
      done += 1;
    };
    record(KernelOp::elementwise, [&] { c = a + scale * b; });
    record(KernelOp::copy, [&] { c = a; });
    const Eigen::Index cols = 1024, rows = elements / cols;
    Eigen::Map<Eigen::ArrayXXf> x(a.data(), cols, rows), y(c.data(), cols, rows);
    record(KernelOp::norm, [&] {
      for (Eigen::Index r = 0; r < rows; ++r) {
        const float mean = x.col(r).mean();
        const float inv = 1.0f / std::sqrt((x.col(r) - mean).square().mean() + 1e-5f);
        y.col(r) = (x.col(r) - mean) * inv;
      }
    });
    record(KernelOp::softmax, [&] {
      for (Eigen::Index r = 0; r < rows; ++r) {
        const float top = x.col(r).maxCoeff();
        y.col(r) = (x.col(r) - top).exp();
        y.col(r) /= y.col(r).sum();
      }
    });
  }
  raise_peak_to_best_gemm_rate(profile, cpu, peak, host);

  set_bandwidth_from_triad(profile, stream_sizes.back(), host, date);

  // ---- MPI collectives over loopback, 2..max_ranks ranks ----
  for (int ranks = 2; ranks <= max_ranks && !options.mpi_bench.empty(); ++ranks) {
    progress(fmt::format("MPI collectives on {} ranks", ranks));
    measure_mpi_links(profile, options, ranks, host, date, version);
    done += 4;
  }
  if (options.on_progress) options.on_progress(1.0, "done");
  profile.meta = Json{{"source", "measured"}, {"backend", "cpu"}, {"host", host}, {"date", date},
                      {"quick", options.quick}, {"cpu", cpu.model}};
  return profile;
}

}  // namespace tessel::profiles
