// The cuDNN SDPA graphs as data (cudnn_graph.cpp), on the CPU: their structure (uids, one
// producer per virtual tensor, strides that fit, the causal mask's direction, the masked
// value per version) and their meaning: a small interpreter runs each graph node by node
// through the dims and strides cuDNN would get, and must equal the CPU backend's attention.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "cudnn_graph.hpp"
#include "tessel/kernels/backend.hpp"

using namespace tessel::kernels;
using namespace tessel::kernels::cuda::cudnn;

namespace {

using Index = std::array<std::int64_t, 4>;

std::int64_t offset(const Tensor& t, const Index& i) {
  std::int64_t at = 0;
  for (std::size_t d = 0; d < 4; ++d) at += (t.dims[d] == 1 ? 0 : i[d]) * t.strides[d];
  return at;
}

std::int64_t span(const Tensor& t) {
  std::int64_t last = 0;
  for (std::size_t d = 0; d < 4; ++d) last += (t.dims[d] - 1) * t.strides[d];
  return last + 1;
}

template <typename F>
void each_index(const std::vector<std::int64_t>& dims, F&& f) {
  Index i{};
  for (i[0] = 0; i[0] < dims[0]; ++i[0])
    for (i[1] = 0; i[1] < dims[1]; ++i[1])
      for (i[2] = 0; i[2] < dims[2]; ++i[2])
        for (i[3] = 0; i[3] < dims[3]; ++i[3]) f(i);
}

// Runs `g` in fp32 on buffers laid out by each tensor's strides. A node reading a tensor
// no earlier node (or the caller) wrote fails the test.
class Interpreter {
 public:
  Interpreter(Graph g, std::map<std::int64_t, std::vector<float>> inputs) : g_(std::move(g)), memory_(std::move(inputs)) {
    for (const Tensor& t : g_.tensors)
      if (t.by_value) memory_[t.uid] = {t.value};
    for (const Node& n : g_.nodes) run(n);
  }
  float at(std::int64_t uid, const Index& i) const { return read(g_.tensor(uid), i); }

 private:
  float read(const Tensor& t, const Index& i) const {
    const auto found = memory_.find(t.uid);
    EXPECT_NE(found, memory_.end()) << t.name << " read before it was written";
    if (found == memory_.end()) return std::numeric_limits<float>::quiet_NaN();
    return found->second.at(std::size_t(offset(t, i)));
  }
  std::vector<float>& output(const Tensor& t) {
    EXPECT_EQ(memory_.count(t.uid), 0u) << t.name << " written twice";
    return memory_[t.uid] = std::vector<float>(std::size_t(span(t)), std::numeric_limits<float>::quiet_NaN());
  }

  void run(const Node& n) {
    const Tensor& y = g_.tensor(n.y);
    if (n.kind == NodeKind::reshape) {  // the same memory read through y's strides
      ASSERT_EQ(span(y), span(g_.tensor(n.x))) << n.name;
      memory_[y.uid] = memory_.at(n.x);
      return;
    }
    std::vector<float>& out = output(y);
    const Tensor& x = g_.tensor(n.x);
    if (n.kind == NodeKind::matmul) {
      const Tensor& b = g_.tensor(n.b);
      each_index(y.dims, [&](const Index& i) {
        float sum = 0.0f;
        for (std::int64_t k = 0; k < x.dims[3]; ++k)
          sum += read(x, {i[0], i[1], i[2], k}) * read(b, {i[0], i[1], k, i[3]});
        out[std::size_t(offset(y, i))] = sum;
      });
    } else if (n.kind == NodeKind::reduction) {
      const bool max = n.reduction == ReductionOp::max;
      each_index(y.dims, [&](const Index& i) { out[std::size_t(offset(y, i))] = max ? -INFINITY : 0.0f; });
      each_index(x.dims, [&](const Index& i) {
        float& acc = out[std::size_t(offset(y, i))];
        acc = max ? std::max(acc, read(x, i)) : acc + read(x, i);
      });
    } else {
      each_index(y.dims, [&](const Index& i) { out[std::size_t(offset(y, i))] = pointwise(n, i); });
    }
  }

  float pointwise(const Node& n, const Index& i) const {
    if (n.mode == PointwiseMode::gen_index) return float(i[std::size_t(n.axis)]);
    const float x = read(g_.tensor(n.x), i);
    const float b = n.b ? read(g_.tensor(n.b), i) : 0.0f;
    switch (n.mode) {
      case PointwiseMode::add: return x + b;
      case PointwiseMode::sub: return x - b;
      case PointwiseMode::mul: return x * b;
      case PointwiseMode::div: return x / b;
      case PointwiseMode::exp: return std::exp(x);
      case PointwiseMode::log: return std::log(x);
      case PointwiseMode::cmp_ge: return x >= b ? 1.0f : 0.0f;
      case PointwiseMode::binary_select: return read(g_.tensor(n.t), i) != 0.0f ? x : b;
      default: ADD_FAILURE() << n.name << ": no interpretation"; return 0.0f;
    }
  }

  const Graph g_;
  std::map<std::int64_t, std::vector<float>> memory_;
};

std::vector<float> random_values(std::mt19937& rng, std::size_t n) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> out(n);
  for (float& x : out) x = uniform(rng);
  return out;
}

// y's rows [bh x s x d] (or [bh x s] stats) read back from the interpreter.
std::vector<float> rows(const Interpreter& run, std::int64_t uid, int bh, int s, int d) {
  std::vector<float> out;
  for (int b = 0; b < bh; ++b)
    for (int i = 0; i < s; ++i)
      for (int c = 0; c < d; ++c) out.push_back(run.at(uid, {b, 0, i, c}));
  return out;
}

::testing::AssertionResult close_to(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": " << got.size() << " values, want " << want.size();
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - want[i]) <= 1e-4 * (1.0 + std::abs(want[i]))))
      return ::testing::AssertionFailure() << what << " element " << i << ": " << got[i] << ", want " << want[i];
  return ::testing::AssertionSuccess();
}

constexpr int kBh = 3, kSeq = 9, kDim = 8;
const SdpaShape kShape{kBh, kSeq, kDim, DataType::bf16, 0.3f};

TEST(CudnnGraph, ForwardComputesTesselsAttentionAndLse) {
  std::mt19937 rng(7);
  const std::size_t n = std::size_t(kBh) * kSeq * kDim;
  std::vector<float> q = random_values(rng, n), k = random_values(rng, n), v = random_values(rng, n);
  std::vector<float> out(n), lse(std::size_t(kBh) * kSeq);
  Attention a;
  a.bh = kBh, a.q_len = a.kv_len = kSeq, a.head_dim = kDim, a.scale = kShape.scale;
  a.q = f32(q.data()), a.k = f32(k.data()), a.v = f32(v.data()), a.out = f32(out.data()), a.lse = lse.data();
  cpu_backend().attention_forward(tessel::Stream::compute, a);
  for (const std::size_t version : {90100u, 91900u}) {
    const Interpreter run(forward_graph(kShape, version), {{uid::q, q}, {uid::k, k}, {uid::v, v}});
    EXPECT_TRUE(close_to(rows(run, uid::o, kBh, kSeq, kDim), out, "O"));
    EXPECT_TRUE(close_to(rows(run, uid::stats, kBh, kSeq, 1), lse, "Stats"));
  }
}

TEST(CudnnGraph, BackwardComputesTesselsGradients) {
  std::mt19937 rng(8);
  const std::size_t n = std::size_t(kBh) * kSeq * kDim, rows_n = std::size_t(kBh) * kSeq;
  std::vector<float> q = random_values(rng, n), k = random_values(rng, n), v = random_values(rng, n);
  std::vector<float> d_o = random_values(rng, n), out(n), lse(rows_n), delta(rows_n);
  std::vector<float> dq(n, 0.0f), dk(n), dv(n);
  Attention a;
  a.bh = kBh, a.q_len = a.kv_len = kSeq, a.head_dim = kDim, a.scale = kShape.scale;
  a.q = f32(q.data()), a.k = f32(k.data()), a.v = f32(v.data()), a.out = f32(out.data()), a.lse = lse.data();
  cpu_backend().attention_forward(tessel::Stream::compute, a);
  cpu_backend().attention_delta(tessel::Stream::compute, f32(d_o.data()), f32(out.data()), delta.data(),
                                std::int64_t(rows_n), kDim);
  AttentionGrad g;
  g.bh = kBh, g.q_len = g.kv_len = kSeq, g.head_dim = kDim, g.scale = kShape.scale;
  g.q = a.q, g.k = a.k, g.v = a.v, g.dout = f32(d_o.data()), g.lse = lse.data(), g.delta = delta.data();
  g.dq = f32(dq.data()), g.dk = f32(dk.data()), g.dv = f32(dv.data());
  cpu_backend().attention_backward(tessel::Stream::compute, g);
  const Interpreter run(backward_graph(kShape, 91900),
                        {{uid::q, q}, {uid::k, k}, {uid::v, v}, {uid::o, out}, {uid::d_o, d_o}, {uid::stats, lse}});
  EXPECT_TRUE(close_to(rows(run, uid::softmax_sum, kBh, kSeq, 1), delta, "softmax_sum"));
  EXPECT_TRUE(close_to(rows(run, uid::dq, kBh, kSeq, kDim), dq, "dQ"));
  EXPECT_TRUE(close_to(rows(run, uid::dk, kBh, kSeq, kDim), dk, "dK"));
  EXPECT_TRUE(close_to(rows(run, uid::dv, kBh, kSeq, kDim), dv, "dV"));
}

// Strides fit dims when no two elements share memory (taken from the smallest stride).
bool strides_fit(const Tensor& t) {
  std::vector<std::size_t> order{0, 1, 2, 3};
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return t.strides[a] < t.strides[b]; });
  std::int64_t covered = 1;
  for (const std::size_t d : order) {
    if (t.dims[d] == 1) continue;
    if (t.strides[d] < covered) return false;
    covered = t.strides[d] * t.dims[d];
  }
  return true;
}

void expect_well_formed(const Graph& g, const std::set<std::int64_t>& pack) {
  std::set<std::int64_t> uids;
  std::map<std::int64_t, int> writes, reads;
  for (const Tensor& t : g.tensors) {
    EXPECT_TRUE(uids.insert(t.uid).second) << "uid " << t.uid << " twice";
    EXPECT_EQ(t.dims.size(), 4u) << t.name;
    EXPECT_EQ(t.strides.size(), t.dims.size()) << t.name;
    if (!t.is_virtual) {
      EXPECT_TRUE(strides_fit(t)) << t.name << " strides overlap";
    }
    EXPECT_EQ(t.is_virtual, t.uid >= 100) << t.name;
  }
  std::set<std::int64_t> produced;
  for (const Node& n : g.nodes) produced.insert(n.y);
  for (const Node& n : g.nodes) {
    for (const std::int64_t in : {n.x, n.b, n.t}) {
      if (in == 0) continue;
      if (produced.count(in)) {
        EXPECT_EQ(writes.count(in), 1u) << n.name << " reads " << in << " before it is made";
      }
      ++reads[in];
    }
    ++writes[n.y];
  }
  for (const Tensor& t : g.tensors) {
    if (t.is_virtual) {
      EXPECT_EQ(writes[t.uid], 1) << t.name;
      EXPECT_GE(reads[t.uid], 1) << t.name << " computed but unused";
    } else if (t.by_value) {
      EXPECT_EQ(writes[t.uid], 0) << t.name;
    }
  }
  const std::vector<std::int64_t> named = g.variant_pack_uids();
  EXPECT_EQ(std::set<std::int64_t>(named.begin(), named.end()), pack);
}

TEST(CudnnGraph, GraphsAreWellFormedAndNameTheirTensors) {
  expect_well_formed(forward_graph(kShape, 91900), {uid::q, uid::k, uid::v, uid::o, uid::stats, uid::scale,
                                                    uid::masked_score});
  expect_well_formed(backward_graph(kShape, 91900),
                     {uid::q, uid::k, uid::v, uid::o, uid::d_o, uid::stats, uid::dq, uid::dk, uid::dv, uid::softmax_sum,
                      uid::scale, uid::one, uid::masked_score});
  // K enters as K^T: the same memory as K's rows, read down the columns.
  const Graph forward = forward_graph(kShape, 91900);
  const Tensor& kt = forward.tensor(uid::k);
  EXPECT_EQ(kt.dims, (std::vector<std::int64_t>{kBh, 1, kDim, kSeq}));
  EXPECT_EQ(kt.strides, (std::vector<std::int64_t>{kSeq * kDim, kSeq * kDim, 1, kDim}));
}

TEST(CudnnGraph, CausalMaskKeepsKeysUpToTheQueryAndMasksWithTheVersionsValue) {
  for (const auto& [version, masked] :
       {std::pair{std::size_t(90900), std::numeric_limits<float>::lowest()},
        std::pair{std::size_t(91000), -std::numeric_limits<float>::infinity()}}) {
    EXPECT_EQ(masked_score(version), masked);
    for (const Graph& g : {forward_graph(kShape, version), backward_graph(kShape, version)}) {
      EXPECT_EQ(g.tensor(uid::masked_score).value, masked);
      const auto compare = std::find_if(g.nodes.begin(), g.nodes.end(),
                                        [](const Node& n) { return n.mode == PointwiseMode::cmp_ge; });
      ASSERT_NE(compare, g.nodes.end());
      // row (axis 2, the query) >= column (axis 3, the key): the key is visible.
      const auto producer = [&](std::int64_t id) {
        return *std::find_if(g.nodes.begin(), g.nodes.end(), [&](const Node& n) { return n.y == id; });
      };
      EXPECT_EQ(producer(compare->x).axis, 2);
      EXPECT_EQ(producer(compare->b).axis, 3);
      const auto select = std::find_if(g.nodes.begin(), g.nodes.end(),
                                       [](const Node& n) { return n.mode == PointwiseMode::binary_select; });
      ASSERT_NE(select, g.nodes.end());
      EXPECT_EQ(select->b, uid::masked_score);
      EXPECT_EQ(select->t, compare->y);
    }
  }
}

}  // namespace
