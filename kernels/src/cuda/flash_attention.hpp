// The fused (flash-style) causal attention kernels the CUDA backend's attention ops call
// (flash_attention.cu): the semantics are backend.hpp's Attention and AttentionGrad, the
// CPU backend's attention_forward / attention_backward being the reference.
#pragma once

#include <cuda_runtime.h>

#include "tessel/kernels/backend.hpp"

namespace tessel::kernels::cuda {

// out, lse for one key/value block (merged into them with a.merge), on `stream`.
void flash_attention_forward(cudaStream_t stream, const Attention& a);
// dq +=, dk and dv (+= with a.accumulate_kv) for one key/value block, on `stream`;
// deterministic: no atomics, every element summed in one fixed order.
void flash_attention_backward(cudaStream_t stream, const AttentionGrad& a);

}  // namespace tessel::kernels::cuda
