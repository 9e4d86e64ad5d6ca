// cuDNN's fused attention path (cudnn_sdpa.cpp, cudnn_api.cpp) without a GPU, through a
// fake cuDNN that checks every backend API call (fake_cudnn.hpp): valid graphs, every
// tensor bound, plans cached, descriptors freed; each failure and each shape cuDNN is not
// given comes back as "not supported: <why>". With cuDNN 9.8+ installed, the graphs are
// also emitted into the real library, which validates every descriptor as it is finalized.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "cudnn_sdpa.hpp"
#include "fake_cudnn.hpp"
#include "tessel/core/error.hpp"

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::kernels::cuda;

namespace {

// Host memory standing in for device tensors: the fake never reads it.
struct Memory {
  std::vector<double> block = std::vector<double>(1 << 16);
  void* at(std::size_t bytes) { return reinterpret_cast<char*>(block.data()) + bytes; }
};

struct Hooks {
  Memory workspace_memory;
  std::size_t workspace_bytes = 0;
  bool fail_workspace = false;
  struct Added {
    Ref sum;
    CRef term;
    std::int64_t n;
  };
  std::vector<Added> added;
  DeviceHooks make() {
    DeviceHooks hooks;
    hooks.workspace = [this](void*, std::size_t bytes) {
      if (fail_workspace) throw Error("cuda: cannot allocate " + std::to_string(bytes) + " bytes");
      workspace_bytes = bytes;
      return workspace_memory.at(0);
    };
    hooks.accumulate = [this](void*, Ref sum, CRef term, std::int64_t n) { added.push_back({sum, term, n}); };
    return hooks;
  }
};

void* const kFakeStream = reinterpret_cast<void*>(std::uintptr_t(0x5700));

struct Tensors {
  Memory memory;
  Attention forward(int bh = 4, int seq = 256, int d = 64, DType type = DType::bf16) {
    Attention a;
    a.bh = bh, a.q_len = a.kv_len = seq, a.head_dim = d, a.scale = 0.125f;
    a.q = CRef(memory.at(0), type), a.k = CRef(memory.at(4096), type), a.v = CRef(memory.at(8192), type);
    a.out = Ref{memory.at(12288), type}, a.lse = static_cast<float*>(memory.at(16384));
    return a;
  }
  AttentionGrad backward(bool accumulate_kv, int seq = 256, int d = 64) {
    const Attention a = forward(4, seq, d);
    AttentionGrad g;
    g.bh = a.bh, g.q_len = g.kv_len = seq, g.head_dim = d, g.scale = a.scale, g.accumulate_kv = accumulate_kv;
    g.q = a.q, g.k = a.k, g.v = a.v, g.out = a.out, g.dout = CRef(memory.at(20480), DType::bf16);
    g.lse = a.lse, g.delta = static_cast<float*>(memory.at(24576));
    g.dq = Ref{memory.at(28672), DType::bf16}, g.dk = Ref{memory.at(32768), DType::bf16};
    g.dv = Ref{memory.at(36864), DType::bf16};
    return g;
  }
};

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }
bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(CudnnSdpa, ForwardEmitsAValidGraphBindsItsTensorsAndCachesThePlan) {
  fake::FakeCudnn fake;
  Hooks hooks;
  Tensors t;
  {
    CudnnSdpa sdpa(fake.api(), 90, hooks.make());
    ASSERT_EQ(sdpa.unavailable(), "");
    const Attention a = t.forward();
    const SdpaOutcome outcome = sdpa.forward(kFakeStream, a);
    ASSERT_TRUE(outcome.ran) << outcome.note;
    ASSERT_TRUE(fake.violations.empty()) << fake.violations.front();
    // The first engine config does not finalize (a knob), the second becomes the plan.
    EXPECT_EQ(outcome.note, "cudnn 9.19.0 engine 1 (heuristics mode A, config 2 of 2)");
    EXPECT_EQ(fake.stream, kFakeStream);
    EXPECT_EQ(fake.pointer_of(cudnn::uid::q), a.q.data);
    EXPECT_EQ(fake.pointer_of(cudnn::uid::k), a.k.data);  // read as K^T
    EXPECT_EQ(fake.pointer_of(cudnn::uid::v), a.v.data);
    EXPECT_EQ(fake.pointer_of(cudnn::uid::o), a.out.data);
    EXPECT_EQ(fake.pointer_of(cudnn::uid::stats), a.lse);
    EXPECT_EQ(*static_cast<float*>(fake.pointer_of(cudnn::uid::scale)), a.scale);
    EXPECT_EQ(*static_cast<float*>(fake.pointer_of(cudnn::uid::masked_score)), cudnn::masked_score(91900));
    EXPECT_EQ(fake.pack_workspace, hooks.workspace_memory.at(0));
    EXPECT_EQ(hooks.workspace_bytes, 4096u);
    // The same shape again: no new graph or plan; another scale is another plan.
    EXPECT_TRUE(sdpa.forward(kFakeStream, a).ran);
    EXPECT_EQ(fake.graphs, 1);
    EXPECT_EQ(fake.executions, 2);
    Attention rescaled = a;
    rescaled.scale = 0.25f;
    EXPECT_TRUE(sdpa.forward(kFakeStream, rescaled).ran);
    EXPECT_EQ(fake.graphs, 2);
    EXPECT_TRUE(hooks.added.empty());
  }
  EXPECT_EQ(fake.live(), 0) << "descriptors outlived the plans";
  EXPECT_EQ(fake.handles_destroyed, 1);
  EXPECT_TRUE(fake.violations.empty());
}

TEST(CudnnSdpa, BackwardWritesOrAccumulatesAsBackendHppSays) {
  for (const bool accumulate_kv : {false, true}) {
    fake::FakeCudnn fake;
    Hooks hooks;
    Tensors t;
    CudnnSdpa sdpa(fake.api(), 90, hooks.make());
    const AttentionGrad g = t.backward(accumulate_kv);
    const SdpaOutcome outcome = sdpa.backward(kFakeStream, g);
    ASSERT_TRUE(outcome.ran) << outcome.note;
    ASSERT_TRUE(fake.violations.empty()) << fake.violations.front();
    ASSERT_EQ(fake.pack_uids.size(), 13u);
    EXPECT_EQ(fake.pointer_of(cudnn::uid::o), g.out.data);
    EXPECT_EQ(fake.pointer_of(cudnn::uid::d_o), g.dout.data);
    EXPECT_EQ(*static_cast<float*>(fake.pointer_of(cudnn::uid::one)), 1.0f);
    // cuDNN only writes: dq (always) and dk, dv (when accumulated) go to scratch in the
    // workspace, after cuDNN's own 4096 bytes and softmax_sum, and are then added.
    char* base = static_cast<char*>(hooks.workspace_memory.at(0));
    const std::int64_t n = std::int64_t(g.bh) * g.q_len * g.head_dim;
    const auto inside = [&](void* p) { return p >= base && p < base + hooks.workspace_bytes; };
    EXPECT_TRUE(inside(fake.pointer_of(cudnn::uid::softmax_sum)));
    EXPECT_GE(static_cast<char*>(fake.pointer_of(cudnn::uid::softmax_sum)) - base, 4096);
    EXPECT_TRUE(inside(fake.pointer_of(cudnn::uid::dq)));
    EXPECT_EQ(inside(fake.pointer_of(cudnn::uid::dk)), accumulate_kv);
    EXPECT_EQ(inside(fake.pointer_of(cudnn::uid::dv)), accumulate_kv);
    if (!accumulate_kv) {
      EXPECT_EQ(fake.pointer_of(cudnn::uid::dk), g.dk.data);
      EXPECT_EQ(fake.pointer_of(cudnn::uid::dv), g.dv.data);
    }
    ASSERT_EQ(hooks.added.size(), accumulate_kv ? 3u : 1u);
    const std::vector<std::pair<Ref, std::int64_t>> sums{{g.dq, cudnn::uid::dq}, {g.dk, cudnn::uid::dk},
                                                          {g.dv, cudnn::uid::dv}};
    for (std::size_t i = 0; i < hooks.added.size(); ++i) {
      EXPECT_EQ(hooks.added[i].sum.data, sums[i].first.data);
      EXPECT_EQ(hooks.added[i].term.data, fake.pointer_of(sums[i].second));
      EXPECT_EQ(hooks.added[i].term.type, DType::bf16);
      EXPECT_EQ(hooks.added[i].n, n);
    }
    // The pieces do not overlap: softmax_sum, dq, dk, dv in that order.
    const auto at = [&](std::int64_t id) { return static_cast<char*>(fake.pointer_of(id)); };
    EXPECT_GE(at(cudnn::uid::dq) - at(cudnn::uid::softmax_sum), std::int64_t(g.bh) * g.q_len * 4);
    if (accumulate_kv) {
      EXPECT_GE(at(cudnn::uid::dv) - at(cudnn::uid::dk), n * 2);
    }
  }
}

TEST(CudnnSdpa, EachFailureComesBackAsNotSupported) {
  Tensors t;
  Hooks hooks;
  const auto outcome = [&](fake::FakeCudnn& fake) {
    CudnnSdpa sdpa(fake.api(), 90, hooks.make());
    return sdpa.forward(kFakeStream, t.forward()).note;
  };
  {
    fake::FakeCudnn fake;
    fake.version = 8907;
    EXPECT_EQ(outcome(fake), "not supported: cuDNN 8.9.7 is older than 9.0.0");
    EXPECT_EQ(fake.created, 0);
  }
  {
    fake::FakeCudnn fake;
    fake.version = 91001;
    EXPECT_EQ(outcome(fake), "not supported: cuDNN 9.10.1 (known SDPA bugs)");
  }
  {
    fake::FakeCudnn fake;
    fake.create_status = 1001;
    EXPECT_TRUE(starts_with(outcome(fake), "not supported: cudnnCreate failed: CUDNN_STATUS_NOT_INITIALIZED"));
  }
  {
    fake::FakeCudnn fake;
    fake.engines = 0;
    CudnnSdpa sdpa(fake.api(), 90, hooks.make());
    const std::string first = sdpa.forward(kFakeStream, t.forward()).note;
    EXPECT_EQ(first, "not supported: heuristics offered no engine (modes A and fallback)");
    EXPECT_EQ(fake.heuristics_queries, 2);
    EXPECT_EQ(sdpa.forward(kFakeStream, t.forward()).note, first);
    EXPECT_EQ(fake.heuristics_queries, 2) << "a refused shape is remembered, not asked again";
    EXPECT_TRUE(fake.violations.empty());
  }
  {
    fake::FakeCudnn fake;
    fake.failing_plans = 5;
    const std::string note = outcome(fake);
    EXPECT_TRUE(contains(note, "cudnnBackendFinalize(execution plan 2 of 2, heuristics mode A) failed: "
                               "CUDNN_STATUS_NOT_SUPPORTED (3000): fake: this engine does not take the graph"))
        << note;
    EXPECT_EQ(fake.live(), 0);
  }
  {
    fake::FakeCudnn fake;
    fake.execute_status = 5000;
    EXPECT_TRUE(starts_with(outcome(fake), "not supported: cudnnBackendExecute failed: CUDNN_STATUS_EXECUTION_FAILED"));
  }
  {
    fake::FakeCudnn fake;
    fake.workspace_bytes = CudnnSdpa::kMaxWorkspaceBytes + 1;
    EXPECT_TRUE(contains(outcome(fake), "workspace of 2147483649 bytes"));
    EXPECT_EQ(fake.live(), 0);
  }
  {
    fake::FakeCudnn fake;
    hooks.fail_workspace = true;
    EXPECT_EQ(outcome(fake), "not supported: cuda: cannot allocate 4096 bytes");
    EXPECT_EQ(fake.executions, 0);
  }
}

TEST(CudnnSdpa, RefusesWhatCudnnIsNotGivenWithoutCallingIt) {
  fake::FakeCudnn fake;
  Hooks hooks;
  Tensors t;
  CudnnSdpa sdpa(fake.api(), 90, hooks.make());
  const int created = fake.created;
  EXPECT_EQ(sdpa.refusal(t.forward()), "");
  Attention a = t.forward();
  a.merge = true;
  EXPECT_TRUE(contains(sdpa.refusal(a), "merge"));
  a = t.forward(), a.kv_len = 128;
  EXPECT_EQ(sdpa.refusal(a), "not supported: q_len 256 != kv_len 128");
  a = t.forward(), a.q_first = 256;
  EXPECT_EQ(sdpa.refusal(a), "not supported: q_first 256 != kv_first 0");
  a.kv_first = 256;  // the own block of a sequence-parallel rank: the same causal square
  EXPECT_EQ(sdpa.refusal(a), "");
  EXPECT_EQ(sdpa.refusal(t.forward(4, 256, 64, DType::f32)), "not supported: element type f32");
  EXPECT_EQ(sdpa.refusal(t.forward(4, 256, 64, DType::f16)), "");
  a = t.forward(), a.v.type = DType::f16;
  EXPECT_EQ(sdpa.refusal(a), "not supported: v is f16 but q is bf16");
  for (const int d : {8, 16, 128}) EXPECT_EQ(sdpa.refusal(t.forward(4, 256, d)), "") << d;
  for (const int d : {4, 12, 136}) EXPECT_TRUE(contains(sdpa.refusal(t.forward(4, 256, d)), "head_dim")) << d;
  a = t.forward(), a.out.data = static_cast<char*>(a.out.data) + 2;
  EXPECT_EQ(sdpa.refusal(a), "not supported: a tensor not 16-byte aligned");
  AttentionGrad g = t.backward(false);
  EXPECT_EQ(sdpa.refusal(g), "");
  g.out = CRef();
  EXPECT_TRUE(contains(sdpa.refusal(g), "no out given"));
  g = t.backward(false, 1);
  EXPECT_EQ(sdpa.refusal(g), "not supported: a backward over one position");
  EXPECT_EQ(sdpa.refusal(t.backward(false, 100)), "") << "any length after cuDNN 9.15.0";
  EXPECT_EQ(fake.created, created) << "a refusal made cuDNN calls";

  CudnnSdpa ampere(fake.api(), 80, hooks.make());
  EXPECT_EQ(ampere.refusal(t.forward()), "");
  EXPECT_TRUE(contains(ampere.refusal(t.backward(false)), "deterministic only on sm_90"));
  CudnnSdpa volta(fake.api(), 70, hooks.make());
  EXPECT_TRUE(contains(volta.refusal(t.forward()), "sm_80"));
  fake.version = 91500;
  CudnnSdpa older(fake.api(), 90, hooks.make());
  EXPECT_EQ(older.refusal(t.backward(false, 100)), "not supported: seq 100 not a multiple of 128 on cuDNN 9.15.0");
  EXPECT_EQ(older.refusal(t.backward(false, 256)), "");
}

TEST(CudnnSdpa, LoadingFailsCleanlyWithoutCudnn) {
  Hooks hooks;
  Tensors t;
  CudnnSdpa missing("libtessel-no-such-cudnn.so.9", 90, hooks.make());
  EXPECT_TRUE(starts_with(missing.unavailable(), "not supported: dlopen(libtessel-no-such-cudnn.so.9) failed"))
      << missing.unavailable();
  const SdpaOutcome outcome = missing.forward(kFakeStream, t.forward());
  EXPECT_FALSE(outcome.ran);
  EXPECT_EQ(outcome.note, missing.unavailable());
  EXPECT_EQ(missing.backward(kFakeStream, t.backward(true)).note, missing.unavailable());
  CudnnSdpa not_cudnn("libc.so.6", 90, hooks.make());
  EXPECT_EQ(not_cudnn.unavailable(), "not supported: libc.so.6 lacks cudnnGetVersion");
  EXPECT_TRUE(hooks.added.empty());
}

TEST(CudnnSdpa, TesselAttentionChoosesThePath) {
  const char* saved = std::getenv("TESSEL_ATTENTION");
  const std::string before = saved ? saved : "";
  unsetenv("TESSEL_ATTENTION");
  EXPECT_TRUE(cudnn_attention_wanted());
  setenv("TESSEL_ATTENTION", "cudnn", 1);
  EXPECT_TRUE(cudnn_attention_wanted());
  setenv("TESSEL_ATTENTION", "flash", 1);
  EXPECT_FALSE(cudnn_attention_wanted());
  setenv("TESSEL_ATTENTION", "fast", 1);
  EXPECT_THROW(cudnn_attention_wanted(), Error);
  if (saved) setenv("TESSEL_ATTENTION", before.c_str(), 1);
  else unsetenv("TESSEL_ATTENTION");
}

// The installed cuDNN, where there is one: 9.8+ takes an operation graph without a
// handle, so every descriptor is validated by cuDNN itself with no GPU.
const char* installed_cudnn() {
  static const char* const candidates[] = {CudnnSdpa::kLibrary, "/usr/local/cuda/lib/libcudnn.so.9",
                                           "/usr/local/cuda/lib64/libcudnn.so.9"};
  for (const char* path : candidates) {
    cudnn::Api api;
    if (cudnn::load_api(path, api).empty()) return path;
  }
  return nullptr;
}

TEST(CudnnSdpa, InstalledCudnnFinalizesBothGraphs) {
  const char* path = installed_cudnn();
  if (path == nullptr) GTEST_SKIP() << "no libcudnn.so.9 here";
  cudnn::Api api;
  ASSERT_EQ(cudnn::load_api(path, api), "");
  const std::size_t version = api.get_version();
  if (version < 90800) GTEST_SKIP() << "cuDNN " << cudnn::version_text(version) << " needs a handle (a GPU)";
  for (const cudnn::DataType io : {cudnn::DataType::bf16, cudnn::DataType::f16}) {
    const cudnn::SdpaShape shape{48, 1024, 64, io, 0.125f};
    for (const cudnn::Graph& graph : {cudnn::forward_graph(shape, version), cudnn::backward_graph(shape, version)}) {
      cudnn::Descriptors owned(api);
      EXPECT_NO_THROW(cudnn::emit_operation_graph(api, nullptr, graph, version, owned));
    }
  }
  // And it does check: Q with three dims is refused, as a tensor or by the first product.
  cudnn::Graph broken = cudnn::forward_graph({48, 1024, 64, cudnn::DataType::bf16, 0.125f}, version);
  broken.tensors.front().dims.pop_back();
  cudnn::Descriptors owned(api);
  try {
    cudnn::emit_operation_graph(api, nullptr, broken, version, owned);
    FAIL() << "cuDNN took a Q of three dims with four strides";
  } catch (const Error& error) {
    EXPECT_TRUE(contains(error.what(), "tensor Q") || contains(error.what(), "matmul bmm1")) << error.what();
  }
}

TEST(CudnnSdpa, InstalledCudnnWithoutAGpuIsNotSupported) {
  const char* path = installed_cudnn();
  if (path == nullptr) GTEST_SKIP() << "no libcudnn.so.9 here";
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present: cudnnCreate succeeds";
  Hooks hooks;
  Tensors t;
  CudnnSdpa sdpa(path, 90, hooks.make());
  EXPECT_TRUE(starts_with(sdpa.unavailable(), "not supported: cudnnCreate failed")) << sdpa.unavailable();
  EXPECT_EQ(sdpa.forward(kFakeStream, t.forward()).note, sdpa.unavailable());
}

}  // namespace
