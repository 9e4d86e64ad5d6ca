// A build without the CUDA toolkit: the CUDA backend is not there, and says so.
#include "tessel/core/error.hpp"
#include "tessel/kernels/backend.hpp"

namespace tessel::kernels {

std::unique_ptr<Backend> make_cuda_backend(int) {
  throw Error("backend cuda: this build of tessel has no CUDA backend (the CUDA toolkit was not found at configure time)");
}
int cuda_device_count() { return 0; }
bool cuda_device_has_fp8(int) { return false; }
bool cuda_backend_built() { return false; }
std::string cuda_attention_path_note() { return "no CUDA backend in this build"; }

std::string cuda_device_name(int) {
  throw Error("cuda device name: this build of tessel has no CUDA backend");
}
double cuda_device_memory_bytes(int) {
  throw Error("cuda device memory: this build of tessel has no CUDA backend");
}

}  // namespace tessel::kernels
