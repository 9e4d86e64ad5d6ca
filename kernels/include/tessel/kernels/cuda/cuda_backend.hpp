// What code outside the kernels module may ask of a CUDA backend (CUDA builds only): the
// native stream each Program stream runs on and the device, for the NCCL communicator,
// which enqueues its collectives on those streams.
#pragma once

#include <cuda_runtime.h>

#include "tessel/kernels/backend.hpp"

namespace tessel::kernels::cuda {

// Throw tessel::Error when `backend` is not a CUDA backend.
cudaStream_t native_stream(Backend& backend, Stream stream);
int device_of(Backend& backend);

}  // namespace tessel::kernels::cuda
