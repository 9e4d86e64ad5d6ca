// The device's name and memory, straight from the CUDA runtime: profiles, reports and the
// gpu-check script name the device they measured without creating a whole backend (no
// streams, no cuBLASLt handle), so this file depends on cudart alone.
#include <cuda_runtime.h>

#include <string>

#include "tessel/core/error.hpp"
#include "tessel/kernels/backend.hpp"

namespace tessel::kernels {

namespace {

cudaDeviceProp properties_of(int device) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  if (device < 0 || device >= count) {
    throw Error("cuda device " + std::to_string(device) + ": no such device (this machine has " +
                std::to_string(count) + ")");
  }
  cudaDeviceProp properties{};
  const cudaError_t status = cudaGetDeviceProperties(&properties, device);
  if (status != cudaSuccess) {
    throw Error("cuda device " + std::to_string(device) + ": cudaGetDeviceProperties failed: " +
                cudaGetErrorString(status));
  }
  return properties;
}

}  // namespace

std::string cuda_device_name(int device) { return properties_of(device).name; }

double cuda_device_memory_bytes(int device) { return double(properties_of(device).totalGlobalMem); }

}  // namespace tessel::kernels
