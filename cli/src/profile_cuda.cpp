// The GPU profiler behind the command line: the checks (a CUDA build, a device, a valid
// index) come first and each is one line; then the profiler runs through the CUDA
// backend, with progress on stderr: a bar on a terminal, one line per point in a log
// (gpu-check runs it with stderr in a file, where a redrawn bar would be noise).
#include "profile_cuda.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>

#include <fmt/format.h>

#include "commands.hpp"
#include "format.hpp"
#include "tessel/core/error.hpp"
#include "tessel/kernels/backend.hpp"
#include "tessel/profiles/gpu_profiler.hpp"
#include "tessel/profiles/profile_store.hpp"

namespace tessel::cli {

int run_profile_cuda(const std::string& db_path, int device, bool quick) {
  if (device < 0) throw Error(fmt::format("--device: must be a CUDA device index (0, 1, ...), got {}", device));
  if (!kernels::cuda_backend_built()) throw Error("profile --backend cuda: this build has no CUDA backend");
  const int count = kernels::cuda_device_count();
  if (count == 0) throw Error("profile --backend cuda: no CUDA device on this machine");
  const int index = device;
  if (index >= count) {
    throw Error(fmt::format("--device: must be 0..{} on this machine ({} CUDA devices), got {}", count - 1, count, index));
  }
  profiles::GpuProfileOptions options;
  options.quick = quick;
  options.device_index = index;
  options.cuda_device_name = kernels::cuda_device_name(index);
  options.cuda_memory_bytes = kernels::cuda_device_memory_bytes(index);
  options.has_fp8 = kernels::cuda_device_has_fp8(index);
  options.cancel = &cancel_flag();
  profiles::ProfileStore store(db_path);  // opened before measuring: a bad database fails first
  std::unique_ptr<kernels::Backend> backend = kernels::make_cuda_backend(index);

  const bool terminal = isatty(STDERR_FILENO) == 1;
  ProgressBar bar(fmt::format("profiling {}", options.cuda_device_name), 0.0);
  const auto start = std::chrono::steady_clock::now();
  options.on_progress = [&](double fraction, const std::string& what) {
    const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (terminal) {
      bar.update(fraction, elapsed_s);
    } else {
      std::fprintf(stderr, "profile: [%3.0f%%] %7.1f s  %s\n", 100 * fraction, elapsed_s, what.c_str());
    }
  };
  profiles::Profile profile;
  try {
    profile = profiles::profile_gpu(*backend, options);
  } catch (...) {
    bar.finish();
    throw;
  }
  bar.finish();
  store.replace_profile(profile);
  int flagged = 0;
  for (const auto& sample : profile.kernels) flagged += sample.flagged;
  std::cout << fmt::format("measured {} kernel samples ({} flagged noisy) on {} (CUDA device {}) into {} as device {}\n",
                           profile.kernels.size(), flagged, options.cuda_device_name, index, store.path(),
                           profile.device.name);
  std::cout << "not measured: tf32 and fp8 GEMMs (not in the Backend interface yet), NCCL collectives (next issue)\n";
  std::cout << fmt::format("see them: tessel profile show --device {} --db {}\n", profile.device.name, store.path());
  return 0;
}

}  // namespace tessel::cli
