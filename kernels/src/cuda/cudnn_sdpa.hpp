// cuDNN's fused causal attention (scaled dot-product attention, forward and backward) for
// the CUDA backend, with backend.hpp's Attention / AttentionGrad semantics. cuDNN is
// loaded at run time; a shape, type, version or device it does not take, or any cuDNN
// failure, comes back as "not supported: <why>" and the backend runs tessel's flash
// kernel instead. Plain C++: the device is reached through the hooks the backend gives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "cudnn_api.hpp"
#include "tessel/kernels/backend.hpp"

namespace tessel::kernels::cuda {

// What cuDNN needs of the backend: scratch memory on a stream (valid until the next
// request on that stream: one request per call), and sum += term on a stream (n elements
// of sum's type), for the gradients backend.hpp accumulates but cuDNN only writes.
struct DeviceHooks {
  std::function<void*(void* stream, std::size_t bytes)> workspace;
  std::function<void(void* stream, Ref sum, CRef term, std::int64_t n)> accumulate;
};

// What a call did: ran on cuDNN (note names version and engine) or not (note is "not
// supported: <why>" and nothing was left half done that the flash kernel would not
// redo).
struct SdpaOutcome {
  bool ran = false;
  std::string note;
};

// TESSEL_ATTENTION: unset, "" or "cudnn" prefer cuDNN where it runs; "flash" always
// uses tessel's kernel. Throws tessel::Error naming the variable for any other value.
bool cudnn_attention_wanted();

class CudnnSdpa {
 public:
  static constexpr const char* kLibrary = "libcudnn.so.9";
  // The largest workspace a plan may ask for (the deterministic backward keeps dP there,
  // bh x seq^2 bf16 values); bigger shapes run on the flash kernel.
  static constexpr std::int64_t kMaxWorkspaceBytes = std::int64_t(2) << 30;

  // Loads `library` (dlopen) for a device of compute capability `sm` (90 for sm_90).
  // Never throws: what failed is kept and every call answers it.
  CudnnSdpa(const char* library, int sm, DeviceHooks hooks);
  // With the calls already resolved (the tests' fake cuDNN).
  CudnnSdpa(const cudnn::Api& api, int sm, DeviceHooks hooks);
  ~CudnnSdpa();
  CudnnSdpa(const CudnnSdpa&) = delete;
  CudnnSdpa& operator=(const CudnnSdpa&) = delete;

  // "" when cuDNN is loaded, new enough and has a handle; else "not supported: <why>".
  const std::string& unavailable() const { return unavailable_; }
  std::size_t version() const { return version_; }

  // "" when cuDNN may run the call; else "not supported: <why>" (no cuDNN call made).
  std::string refusal(const Attention& a) const;
  std::string refusal(const AttentionGrad& g) const;

  // out, lse (a.merge false); dq +=, dk and dv (+= with accumulate_kv), like the flash
  // kernel. The backward needs g.out, the forward's final output: cuDNN recomputes delta
  // from it (rowsum(dout * out)) rather than reading g.delta.
  SdpaOutcome forward(void* stream, const Attention& a);
  SdpaOutcome backward(void* stream, const AttentionGrad& g);

 private:
  enum class Direction { forward, backward };
  struct Cached {
    std::unique_ptr<cudnn::Plan> plan;
    std::string refusal;  // why no plan, when plan is null
  };
  using Key = std::tuple<Direction, int, int, int, int, std::uint32_t>;  // bh, seq, d, io, scale bits

  void start(int sm);
  std::string shared_refusal(int bh, int seq, int head_dim, DType type) const;
  // The plan for a shape, built on first use; null with `why` set when there is none.
  const cudnn::Plan* plan(Direction direction, const cudnn::SdpaShape& shape, std::string& why);
  std::string ran_note(const cudnn::Plan& plan) const;

  cudnn::Api api_;
  DeviceHooks hooks_;
  std::string unavailable_;
  std::size_t version_ = 0;
  int sm_ = 0;
  cudnn::Handle handle_ = nullptr;
  std::mutex mutex_;
  std::map<Key, Cached> plans_;
};

}  // namespace tessel::kernels::cuda
