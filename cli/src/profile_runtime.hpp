// What a rank of this build holds beside its tensors (MPI, the libraries it loaded, the
// data loader): measured by `tessel profile --backend cpu` with the build it profiles, so
// that a build without the CUDA libraries is not priced with one that links them.
#pragma once

#include "tessel/core/device_spec.hpp"

namespace tessel::cli {

// Trains a 2-rank GPT two steps with this build's `tessel run` in a scratch folder and
// returns the median over ranks of the process's peak resident set less the trainer's
// peak tensor bytes. Throws tessel::Error when the run fails.
double measure_rank_runtime_bytes();

// Sets `device` (a CPU device) to the runtime measured on this build, keeping its
// cuda_libraries_bytes, and says so in its sources.
void set_measured_runtime(DeviceSpec& device, double measured_bytes);

}  // namespace tessel::cli
