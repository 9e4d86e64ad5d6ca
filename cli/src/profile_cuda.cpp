// The GPU profiler behind the command line: the checks (a CUDA build, a device, a valid
// index) come first and each is one line; then the profiler runs through the CUDA
// backend, with progress on stderr (measure_into, shared with the CPU profiler; gpu-check
// runs it with stderr in a file, so a log gets one line per point).
#include "profile_cuda.hpp"

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
  profiles::ProfileStore store(db_path);  // opened and checked before measuring: a bad database fails first
  store.check_integrity();
  std::unique_ptr<kernels::Backend> backend = kernels::make_cuda_backend(index);

  measure_into(store, fmt::format("{} (CUDA device {})", options.cuda_device_name, index),
               [&](const ProfileProgress& progress) {
                 options.on_progress = progress;
                 return profiles::profile_gpu(*backend, options);
               });
  return 0;
}

}  // namespace tessel::cli
