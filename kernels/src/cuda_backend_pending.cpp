// The stream accessors of cuda/cuda_backend.hpp in a CUDA build that does not have the
// CUDA backend (kernels/CMakeLists.txt compiles this only while src/cuda/cuda_backend.cu
// is absent): no backend is ever a CUDA backend here, so both say so.
#include <string>

#include "tessel/core/error.hpp"
#include "tessel/kernels/cuda/cuda_backend.hpp"

namespace tessel::kernels::cuda {

namespace {
[[noreturn]] void not_cuda(Backend& backend) {
  throw Error("backend " + std::string(backend.name()) +
              ": not a CUDA backend (this build of tessel has no CUDA backend)");
}
}  // namespace

cudaStream_t native_stream(Backend& backend, Stream) { not_cuda(backend); }
int device_of(Backend& backend) { not_cuda(backend); }

}  // namespace tessel::kernels::cuda
