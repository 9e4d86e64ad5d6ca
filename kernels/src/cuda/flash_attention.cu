// placeholder until the attention helper's flash_attention.cu is merged: the library
// links and the fused attention kernels say they are missing. That file replaces this one.
#include "flash_attention.hpp"
#include "tessel/core/error.hpp"

namespace tessel::kernels::cuda {

void flash_attention_forward(cudaStream_t, const Attention&) {
  throw Error("cuda: flash_attention_forward is not built yet");
}
void flash_attention_backward(cudaStream_t, const AttentionGrad&) {
  throw Error("cuda: flash_attention_backward is not built yet");
}

}  // namespace tessel::kernels::cuda
