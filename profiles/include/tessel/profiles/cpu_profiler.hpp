// `tessel profile --backend cpu`: measures this machine as the local-cpu device of
// CPU runs, where one rank is one process on one core. Eigen GEMMs (fp32, one thread)
// over square and transformer shapes, streaming kernels (triad, copy, layer norm,
// softmax), and MPI collectives over loopback for 2..N ranks from 1 KiB to 256 MiB
// (16 MiB with --quick), which it runs through `mpirun` and the tessel-mpi-bench helper.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "tessel/profiles/profile.hpp"

namespace tessel::profiles {

// What /proc/cpuinfo says about one core: the basis of the device's peak figure.
struct CpuInfo {
  std::string model;
  int cores = 1;
  double ghz = 0;
  int fp32_flops_per_cycle = 0;  // per core: FMA lanes x 2 x FMA ports
  std::string isa;               // avx512 | avx2 | sse
  double peak_fp32_flops_per_s_per_core() const { return ghz * 1e9 * fp32_flops_per_cycle; }
};
CpuInfo detect_cpu();

struct CpuProfileOptions {
  bool quick = false;
  int max_ranks = 0;             // 0 = the core count (at least 2)
  std::string mpi_bench;         // path of tessel-mpi-bench; empty skips collectives
  std::string fabric = "local-cpu/intra";
  // (fraction done, what is being measured)
  std::function<void(double, const std::string&)> on_progress;
  const std::atomic<bool>* cancel = nullptr;
};

// Runs the measurements and returns the measured local-cpu profile. Throws
// tessel::Error if mpirun or the helper fail (their output is in the message).
Profile profile_cpu(const CpuProfileOptions& options);

}  // namespace tessel::profiles
