// cuDNN's fused causal attention for the CUDA backend (cudnn_sdpa.hpp): which calls it
// takes, one plan per shape built on first use (cuDNN compiles its kernels then), and the
// forward and backward runs. The version and shape rules are cudnn-frontend's SDPA
// support checks for the composite graph (node/sdpa_support_surface.h and the backward
// node's pre-validation, v1.23.0) narrowed to what tessel asks.
#include "cudnn_sdpa.hpp"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "tessel/core/error.hpp"

namespace tessel::kernels::cuda {

bool cudnn_attention_wanted() {
  const char* value = std::getenv("TESSEL_ATTENTION");
  if (value == nullptr || std::strcmp(value, "") == 0 || std::strcmp(value, "cudnn") == 0) return true;
  if (std::strcmp(value, "flash") == 0) return false;
  throw Error(std::string("TESSEL_ATTENTION=") + value + ": expected cudnn (the default) or flash");
}

namespace {

constexpr std::size_t kOldestVersion = 90000;        // the composite SDPA graph, cuDNN 9
constexpr std::size_t kPaddedBackwardThrough = 91500;  // up to: seq % 128 != 0 needs a padding mask
constexpr std::size_t kAlignment = 16;               // what the graph's tensors declare
constexpr std::size_t kPieceAlignment = 256;         // pieces carved from one workspace

std::string no(const std::string& why) { return "not supported: " + why; }

bool aligned(const void* pointer) { return reinterpret_cast<std::uintptr_t>(pointer) % kAlignment == 0; }

std::size_t round_up(std::size_t bytes) { return (bytes + kPieceAlignment - 1) / kPieceAlignment * kPieceAlignment; }

std::string type_refusal(DType expected, DType actual, const char* name) {
  if (actual == expected) return "";
  return no(std::string(name) + " is " + std::string(to_string(actual)) + " but q is " +
            std::string(to_string(expected)));
}

std::uint32_t bits(float value) {
  std::uint32_t out = 0;
  std::memcpy(&out, &value, sizeof(out));
  return out;
}

}  // namespace

CudnnSdpa::CudnnSdpa(const char* library, int sm, DeviceHooks hooks) : hooks_(std::move(hooks)) {
  const std::string failed = cudnn::load_api(library, api_);
  if (!failed.empty()) {
    unavailable_ = no(failed);
    return;
  }
  start(sm);
}

CudnnSdpa::CudnnSdpa(const cudnn::Api& api, int sm, DeviceHooks hooks) : api_(api), hooks_(std::move(hooks)) {
  start(sm);
}

void CudnnSdpa::start(int sm) {
  sm_ = sm;
  version_ = api_.get_version();
  if (version_ < kOldestVersion) {
    unavailable_ = no("cuDNN " + cudnn::version_text(version_) + " is older than 9.0.0");
    return;
  }
  try {
    cudnn::Handle handle = nullptr;
    cudnn::check(api_, api_.create(&handle), "cudnnCreate");
    handle_ = handle;
  } catch (const Error& error) {
    unavailable_ = no(error.what());
  }
}

CudnnSdpa::~CudnnSdpa() {
  plans_.clear();  // their descriptors before the handle
  if (handle_ != nullptr) api_.destroy(handle_);
}

std::string CudnnSdpa::shared_refusal(int bh, int seq, int head_dim, DType type) const {
  if (!unavailable_.empty()) return unavailable_;
  // cudnn-frontend refuses both directions on these two releases (known wrong results).
  if (version_ == 91000 || version_ == 91001) return no("cuDNN " + cudnn::version_text(version_) + " (known SDPA bugs)");
  if (sm_ < 80) return no("compute capability " + std::to_string(sm_) + " (cuDNN SDPA needs sm_80 or newer)");
  if (type != DType::bf16 && type != DType::f16) return no("element type " + std::string(to_string(type)));
  if (head_dim < 8 || head_dim > 128 || head_dim % 8 != 0)
    return no("head_dim " + std::to_string(head_dim) + " (a multiple of 8 up to 128)");
  if (bh <= 0 || seq <= 0) return no("an empty shape");
  return "";
}

std::string CudnnSdpa::refusal(const Attention& a) const {
  if (std::string why = shared_refusal(a.bh, a.q_len, a.head_dim, a.q.type); !why.empty()) return why;
  if (a.merge) return no("merge (blocks of a ring are combined by the flash kernel)");
  if (a.q_len != a.kv_len)
    return no("q_len " + std::to_string(a.q_len) + " != kv_len " + std::to_string(a.kv_len));
  if (a.q_first != a.kv_first)
    return no("q_first " + std::to_string(a.q_first) + " != kv_first " + std::to_string(a.kv_first));
  for (const auto& [type, name] : {std::pair{a.k.type, "k"}, std::pair{a.v.type, "v"}, std::pair{a.out.type, "out"}})
    if (std::string why = type_refusal(a.q.type, type, name); !why.empty()) return why;
  if (!aligned(a.q.data) || !aligned(a.k.data) || !aligned(a.v.data) || !aligned(a.out.data) || !aligned(a.lse))
    return no("a tensor not 16-byte aligned");
  return "";
}

std::string CudnnSdpa::refusal(const AttentionGrad& g) const {
  if (std::string why = shared_refusal(g.bh, g.q_len, g.head_dim, g.q.type); !why.empty()) return why;
  if (g.q_len != g.kv_len)
    return no("q_len " + std::to_string(g.q_len) + " != kv_len " + std::to_string(g.kv_len));
  if (g.q_first != g.kv_first)
    return no("q_first " + std::to_string(g.q_first) + " != kv_first " + std::to_string(g.kv_first));
  if (g.out.data == nullptr) return no("no out given (cuDNN computes delta from out and dout)");
  // Its deterministic backward (backend.hpp: the same bits every run) is the dP-workspace
  // kernel cudnn-frontend selects on Hopper; elsewhere that form is not known to be so.
  if (sm_ != 90) return no("backward on compute capability " + std::to_string(sm_) + " (deterministic only on sm_90)");
  if (g.q_len < 2) return no("a backward over one position");
  if (version_ <= kPaddedBackwardThrough && g.q_len % 128 != 0)
    return no("seq " + std::to_string(g.q_len) + " not a multiple of 128 on cuDNN " + cudnn::version_text(version_));
  for (const auto& [type, name] : {std::pair{g.k.type, "k"}, std::pair{g.v.type, "v"}, std::pair{g.out.type, "out"},
                                   std::pair{g.dout.type, "dout"}, std::pair{g.dq.type, "dq"},
                                   std::pair{g.dk.type, "dk"}, std::pair{g.dv.type, "dv"}})
    if (std::string why = type_refusal(g.q.type, type, name); !why.empty()) return why;
  for (const void* p : {g.q.data, g.k.data, g.v.data, g.out.data, g.dout.data, static_cast<const void*>(g.lse),
                        static_cast<const void*>(g.dq.data), static_cast<const void*>(g.dk.data),
                        static_cast<const void*>(g.dv.data)})
    if (!aligned(p)) return no("a tensor not 16-byte aligned");
  return "";
}

const cudnn::Plan* CudnnSdpa::plan(Direction direction, const cudnn::SdpaShape& shape, std::string& why) {
  std::lock_guard lock(mutex_);
  const Key key{direction, shape.bh, shape.seq, shape.head_dim, int(shape.io), bits(shape.scale)};
  auto found = plans_.find(key);
  if (found == plans_.end()) {
    Cached cached;
    try {
      const cudnn::Graph graph = direction == Direction::forward ? cudnn::forward_graph(shape, version_)
                                                                 : cudnn::backward_graph(shape, version_);
      cached.plan = cudnn::build_plan(api_, handle_, graph, version_);
      if (cached.plan->workspace_bytes > kMaxWorkspaceBytes) {
        cached.refusal = no("a workspace of " + std::to_string(cached.plan->workspace_bytes) + " bytes (over " +
                            std::to_string(kMaxWorkspaceBytes) + ")");
        cached.plan.reset();
      }
    } catch (const Error& error) {
      cached.plan.reset();
      cached.refusal = no(error.what());
    }
    found = plans_.emplace(key, std::move(cached)).first;
  }
  why = found->second.refusal;
  return found->second.plan.get();
}

std::string CudnnSdpa::ran_note(const cudnn::Plan& plan) const {
  return "cudnn " + cudnn::version_text(version_) + " " + plan.note;
}

namespace {
cudnn::DataType io_type(DType type) { return type == DType::f16 ? cudnn::DataType::f16 : cudnn::DataType::bf16; }
void* writable(const void* pointer) { return const_cast<void*>(pointer); }  // cuDNN only reads inputs
}  // namespace

SdpaOutcome CudnnSdpa::forward(void* stream, const Attention& a) {
  if (std::string why = refusal(a); !why.empty()) return {false, why};
  std::string why;
  const cudnn::Plan* p = plan(Direction::forward, {a.bh, a.q_len, a.head_dim, io_type(a.q.type), a.scale}, why);
  if (p == nullptr) return {false, why};
  try {
    void* workspace = p->workspace_bytes > 0 ? hooks_.workspace(stream, std::size_t(p->workspace_bytes)) : nullptr;
    cudnn::check(api_, api_.set_stream(handle_, stream), "cudnnSetStream");
    cudnn::execute(api_, handle_, *p,
                   {{cudnn::uid::q, writable(a.q.data)},
                    {cudnn::uid::k, writable(a.k.data)},
                    {cudnn::uid::v, writable(a.v.data)},
                    {cudnn::uid::o, a.out.data},
                    {cudnn::uid::stats, a.lse}},
                   workspace);
  } catch (const Error& error) {
    return {false, no(error.what())};
  }
  return {true, ran_note(*p)};
}

SdpaOutcome CudnnSdpa::backward(void* stream, const AttentionGrad& g) {
  if (std::string why = refusal(g); !why.empty()) return {false, why};
  std::string why;
  const cudnn::Plan* p = plan(Direction::backward, {g.bh, g.q_len, g.head_dim, io_type(g.q.type), g.scale}, why);
  if (p == nullptr) return {false, why};
  // One workspace: cuDNN's own, softmax_sum, then what cuDNN writes that backend.hpp
  // adds instead (dq always; dk and dv with accumulate_kv).
  const std::int64_t rows = std::int64_t(g.bh) * g.q_len, n = rows * g.head_dim;
  const std::size_t gradient_bytes = round_up(std::size_t(n) * element_bytes(g.q.type));
  const std::size_t sum_at = round_up(std::size_t(p->workspace_bytes));
  const std::size_t dq_at = sum_at + round_up(std::size_t(rows) * sizeof(float));
  const std::size_t dk_at = dq_at + gradient_bytes, dv_at = dk_at + gradient_bytes;
  const std::size_t total = g.accumulate_kv ? dv_at + gradient_bytes : dk_at;
  char* base = nullptr;
  try {
    base = static_cast<char*>(hooks_.workspace(stream, total));
    void* dk = g.accumulate_kv ? base + dk_at : g.dk.data;
    void* dv = g.accumulate_kv ? base + dv_at : g.dv.data;
    cudnn::check(api_, api_.set_stream(handle_, stream), "cudnnSetStream");
    cudnn::execute(api_, handle_, *p,
                   {{cudnn::uid::q, writable(g.q.data)},
                    {cudnn::uid::k, writable(g.k.data)},
                    {cudnn::uid::v, writable(g.v.data)},
                    {cudnn::uid::o, writable(g.out.data)},
                    {cudnn::uid::d_o, writable(g.dout.data)},
                    {cudnn::uid::stats, writable(g.lse)},
                    {cudnn::uid::softmax_sum, base + sum_at},
                    {cudnn::uid::dq, base + dq_at},
                    {cudnn::uid::dk, dk},
                    {cudnn::uid::dv, dv}},
                   p->workspace_bytes > 0 ? base : nullptr);
  } catch (const Error& error) {
    return {false, no(error.what())};
  }
  // Enqueued after cuDNN's kernels on the same stream; a failure here is a CUDA error
  // like any other op's, not a reason to run the flash kernel as well.
  hooks_.accumulate(stream, g.dq, CRef(base + dq_at, g.q.type), n);
  if (g.accumulate_kv) {
    hooks_.accumulate(stream, g.dk, CRef(base + dk_at, g.q.type), n);
    hooks_.accumulate(stream, g.dv, CRef(base + dv_at, g.q.type), n);
  }
  return {true, ran_note(*p)};
}

}  // namespace tessel::kernels::cuda
