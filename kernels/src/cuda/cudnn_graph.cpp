// The forward and backward SDPA graphs as data (cudnn_graph.hpp): the composite graphs
// cudnn-frontend (v1.8.0..v1.23.0, read for the facts, not copied) lowers its SDPA nodes to for
// cuDNN 9.0 to 9.20, same nodes, order, dims, strides and types, because cuDNN finds its flash
// engines by matching this pattern. The native SDPA_FWD/BWD ops of 9.13+ express no causal
// mask in 9.19, so they are not used.
#include "cudnn_graph.hpp"

#include <algorithm>
#include <limits>

#include "tessel/core/error.hpp"

#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>
// The mirrored constants must be cuDNN's own.
static_assert(int(tessel::kernels::cuda::cudnn::DescriptorType::operation_reshape) ==
              CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
static_assert(int(tessel::kernels::cuda::cudnn::DescriptorType::operation_reduction) ==
              CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
static_assert(int(tessel::kernels::cuda::cudnn::DescriptorType::variant_pack) == CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
static_assert(int(tessel::kernels::cuda::cudnn::AttributeType::reduction_operator) ==
              CUDNN_TYPE_REDUCTION_OPERATOR_TYPE);
static_assert(int(tessel::kernels::cuda::cudnn::AttributeType::backend_descriptor) == CUDNN_TYPE_BACKEND_DESCRIPTOR);
static_assert(int(tessel::kernels::cuda::cudnn::Attribute::pointwise_t) == CUDNN_ATTR_OPERATION_POINTWISE_TDESC);
static_assert(int(tessel::kernels::cuda::cudnn::Attribute::tensor_by_value) == CUDNN_ATTR_TENSOR_IS_BY_VALUE);
static_assert(int(tessel::kernels::cuda::cudnn::Attribute::pack_workspace) == CUDNN_ATTR_VARIANT_PACK_WORKSPACE);
static_assert(int(tessel::kernels::cuda::cudnn::Attribute::reshape_y) == CUDNN_ATTR_OPERATION_RESHAPE_YDESC);
static_assert(int(tessel::kernels::cuda::cudnn::Attribute::matmul_desc) == CUDNN_ATTR_OPERATION_MATMUL_DESC);
static_assert(int(tessel::kernels::cuda::cudnn::Attribute::reduction_desc) == CUDNN_ATTR_OPERATION_REDUCTION_DESC);
static_assert(int(tessel::kernels::cuda::cudnn::DataType::bf16) == CUDNN_DATA_BFLOAT16);
static_assert(int(tessel::kernels::cuda::cudnn::DataType::boolean) == CUDNN_DATA_BOOLEAN);
static_assert(int(tessel::kernels::cuda::cudnn::PointwiseMode::binary_select) == CUDNN_POINTWISE_BINARY_SELECT);
static_assert(int(tessel::kernels::cuda::cudnn::PointwiseMode::gen_index) == CUDNN_POINTWISE_GEN_INDEX);
static_assert(int(tessel::kernels::cuda::cudnn::PointwiseMode::cmp_ge) == CUDNN_POINTWISE_CMP_GE);
static_assert(int(tessel::kernels::cuda::cudnn::ReductionOp::max) == CUDNN_REDUCE_TENSOR_MAX);
static_assert(tessel::kernels::cuda::cudnn::kHeuristicsModeA == CUDNN_HEUR_MODE_A);
static_assert(int(tessel::kernels::cuda::cudnn::Attribute::engine_global_index) == CUDNN_ATTR_ENGINE_GLOBAL_INDEX);
#if CUDNN_VERSION >= 90800
static_assert(int(tessel::kernels::cuda::cudnn::Attribute::plan_device_properties) ==
              CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP);
#endif
#endif

namespace tessel::kernels::cuda::cudnn {

using Dims = std::vector<std::int64_t>;

const Tensor& Graph::tensor(std::int64_t id) const {
  for (const Tensor& t : tensors)
    if (t.uid == id) return t;
  throw Error("cudnn graph: no tensor with uid " + std::to_string(id));
}

std::vector<std::int64_t> Graph::variant_pack_uids() const {
  std::vector<std::int64_t> ids;
  for (const Tensor& t : tensors)
    if (!t.is_virtual) ids.push_back(t.uid);
  std::sort(ids.begin(), ids.end());
  return ids;
}

float masked_score(std::size_t cudnn_version) {
  return cudnn_version < 91000 ? std::numeric_limits<float>::lowest() : -std::numeric_limits<float>::infinity();
}

namespace {

Dims contiguous(const Dims& dims) {
  Dims strides(dims.size(), 1);
  for (std::size_t i = dims.size() - 1; i > 0; --i) strides[i - 1] = strides[i] * dims[i];
  return strides;
}

// Adds tensors and nodes, inferring a virtual output's dims and strides the way the
// frontend does: broadcast dims, strides of the first input with those dims.
class Builder {
 public:
  explicit Builder(DataType io) : io_(io) {}

  std::int64_t input(std::int64_t id, std::string name, Dims dims, Dims strides, DataType type) {
    add({id, std::move(name), std::move(dims), std::move(strides), type, false, false, 0.0f});
    return id;
  }
  std::int64_t scalar(std::int64_t id, std::string name, float value) {
    add({id, std::move(name), {1, 1, 1, 1}, {1, 1, 1, 1}, DataType::f32, false, true, value});
    return id;
  }
  std::int64_t make_virtual(std::string name, Dims dims, Dims strides, DataType type = DataType::f32) {
    const std::int64_t id = next_virtual_++;
    add({id, std::move(name), std::move(dims), std::move(strides), type, true, false, 0.0f});
    return id;
  }
  void set_type(std::int64_t id, DataType type) { find(id).type = type; }

  // y = a b (batched); a virtual output unless `y` names one.
  std::int64_t matmul(std::string name, std::int64_t a, std::int64_t b, std::int64_t y = 0) {
    if (y == 0) {
      Dims dims = find(a).dims;
      dims.back() = find(b).dims.back();
      y = make_virtual(name + "::C", dims, contiguous(dims));
    }
    Node node;
    node.kind = NodeKind::matmul, node.name = std::move(name), node.x = a, node.b = b, node.y = y;
    graph_.nodes.push_back(node);
    return y;
  }

  std::int64_t pointwise(std::string name, PointwiseMode mode, std::int64_t x, std::int64_t b = 0, std::int64_t t = 0,
                         std::int64_t y = 0, DataType compute = DataType::f32, DataType out = DataType::f32) {
    if (y == 0) {
      Dims dims = find(x).dims;
      for (const std::int64_t in : {b, t})
        if (in != 0)
          for (std::size_t i = 0; i < dims.size(); ++i) dims[i] = std::max(dims[i], find(in).dims[i]);
      Dims strides;
      for (const std::int64_t in : {x, b, t})
        if (in != 0 && strides.empty() && find(in).dims == dims) strides = find(in).strides;
      if (strides.empty()) strides = contiguous(dims);
      y = make_virtual(name + "::out", dims, strides, out);
    }
    Node node;
    node.kind = NodeKind::pointwise, node.name = std::move(name), node.mode = mode, node.compute = compute;
    node.x = x, node.b = b, node.t = t, node.y = y;
    graph_.nodes.push_back(node);
    return y;
  }

  std::int64_t gen_index(std::string name, std::int64_t x, int axis) {
    const std::int64_t y = pointwise(std::move(name), PointwiseMode::gen_index, x, 0, 0, 0, DataType::i32, DataType::i32);
    graph_.nodes.back().axis = axis;
    return y;
  }

  // Sums or maxima over the last dimension: [b, h, s, n] -> [b, h, s, 1].
  std::int64_t reduce(std::string name, ReductionOp op, std::int64_t x, std::int64_t y = 0) {
    if (y == 0) {
      const Dims& in = find(x).dims;
      y = make_virtual(name + "::out", {in[0], in[1], in[2], 1}, {in[1] * in[2], in[2], 1, 1});
    }
    Node node;
    node.kind = NodeKind::reduction, node.name = std::move(name), node.reduction = op, node.x = x, node.y = y;
    graph_.nodes.push_back(node);
    return y;
  }

  // A view of x's memory with other dims and strides (a transpose of the last two).
  std::int64_t reshape(std::string name, std::int64_t x, Dims dims, Dims strides, DataType type) {
    const std::int64_t y = make_virtual(name + "::out", std::move(dims), std::move(strides), type);
    Node node;
    node.kind = NodeKind::reshape, node.name = std::move(name), node.x = x, node.y = y;
    graph_.nodes.push_back(node);
    return y;
  }

  // Scores at key positions after the query's become `masked`: GEN_INDEX of rows and
  // columns, row >= col, and a select (cudnn-frontend's top-left causal mask).
  std::int64_t causal_mask(std::int64_t scores, std::int64_t masked) {
    const std::int64_t row = gen_index("gen_row_index", scores, 2);
    const std::int64_t col = gen_index("gen_col_index", scores, 3);
    const std::int64_t visible =
        pointwise("row_greater_than_col", PointwiseMode::cmp_ge, row, col, 0, 0, DataType::boolean, DataType::boolean);
    return pointwise("causal_select", PointwiseMode::binary_select, scores, masked, visible);
  }

  DataType io() const { return io_; }
  Graph take() { return std::move(graph_); }

 private:
  void add(Tensor t) { graph_.tensors.push_back(std::move(t)); }
  Tensor& find(std::int64_t id) {
    for (Tensor& t : graph_.tensors)
      if (t.uid == id) return t;
    throw Error("cudnn graph: no tensor with uid " + std::to_string(id));
  }

  DataType io_;
  Graph graph_;
  std::int64_t next_virtual_ = 100;
};

// The tensors both graphs bind. K is given as K^T (cuDNN's matmul takes Q and K^T), a
// view of the same [s x d] rows: dims [b, 1, d, s], strides [s d, s d, 1, d].
struct Common {
  std::int64_t b, s, d;
  Dims rows_dims() const { return {b, 1, s, d}; }
  Dims rows_strides() const { return {s * d, s * d, d, 1}; }
  Dims transposed_dims() const { return {b, 1, d, s}; }
  Dims transposed_strides() const { return {s * d, s * d, 1, d}; }
  Dims stats_dims() const { return {b, 1, s, 1}; }
  Dims stats_strides() const { return {s, s, 1, 1}; }
};

Common common(const SdpaShape& shape) { return {shape.bh, shape.seq, shape.head_dim}; }

}  // namespace

Graph forward_graph(const SdpaShape& shape, std::size_t cudnn_version) {
  const Common c = common(shape);
  Builder g(shape.io);
  const std::int64_t q = g.input(uid::q, "Q", c.rows_dims(), c.rows_strides(), g.io());
  const std::int64_t kt = g.input(uid::k, "K", c.transposed_dims(), c.transposed_strides(), g.io());
  const std::int64_t v = g.input(uid::v, "V", c.rows_dims(), c.rows_strides(), g.io());
  const std::int64_t o = g.input(uid::o, "O", c.rows_dims(), c.rows_strides(), g.io());
  const std::int64_t stats = g.input(uid::stats, "Stats", c.stats_dims(), c.stats_strides(), DataType::f32);
  const std::int64_t scale = g.scalar(uid::scale, "attn_scale", shape.scale);
  const std::int64_t masked = g.scalar(uid::masked_score, "masked_score", masked_score(cudnn_version));

  const std::int64_t scores = g.matmul("bmm1", q, kt);
  const std::int64_t scaled = g.pointwise("attn_scale", PointwiseMode::mul, scores, scale);
  const std::int64_t visible = g.causal_mask(scaled, masked);
  // The softmax, keeping its stats: max, exp(x - max), sum, stats = max + log(sum).
  const std::int64_t max = g.reduce("max", ReductionOp::max, visible);
  const std::int64_t shifted = g.pointwise("sub", PointwiseMode::sub, visible, max);
  const std::int64_t exp = g.pointwise("exp", PointwiseMode::exp, shifted);
  const std::int64_t sum = g.reduce("sum", ReductionOp::add, exp);
  const std::int64_t log = g.pointwise("log", PointwiseMode::log, sum);
  g.pointwise("add", PointwiseMode::add, max, log, 0, stats);
  // The probabilities enter the second product in the io type, as the engines require.
  const std::int64_t probs = g.pointwise("div", PointwiseMode::div, exp, sum);
  g.set_type(probs, g.io());
  g.matmul("bmm2", probs, v, o);
  return g.take();
}

Graph backward_graph(const SdpaShape& shape, std::size_t cudnn_version) {
  const Common c = common(shape);
  const std::int64_t s = c.s;
  Builder g(shape.io);
  const std::int64_t q = g.input(uid::q, "Q", c.rows_dims(), c.rows_strides(), g.io());
  const std::int64_t kt = g.input(uid::k, "K", c.transposed_dims(), c.transposed_strides(), g.io());
  const std::int64_t vt = g.input(uid::v, "V", c.transposed_dims(), c.transposed_strides(), g.io());
  const std::int64_t o = g.input(uid::o, "O", c.rows_dims(), c.rows_strides(), g.io());
  const std::int64_t d_o = g.input(uid::d_o, "dO", c.rows_dims(), c.rows_strides(), g.io());
  const std::int64_t stats = g.input(uid::stats, "Stats", c.stats_dims(), c.stats_strides(), DataType::f32);
  const std::int64_t dq = g.input(uid::dq, "dQ", c.rows_dims(), c.rows_strides(), g.io());
  const std::int64_t dk = g.input(uid::dk, "dK", c.rows_dims(), c.rows_strides(), g.io());
  const std::int64_t dv = g.input(uid::dv, "dV", c.rows_dims(), c.rows_strides(), g.io());
  const std::int64_t softmax_sum =
      g.input(uid::softmax_sum, "softmax_sum", c.stats_dims(), c.stats_strides(), DataType::f32);
  const std::int64_t scale = g.scalar(uid::scale, "attn_scale", shape.scale);
  const std::int64_t one = g.scalar(uid::one, "one", 1.0f);
  const std::int64_t masked = g.scalar(uid::masked_score, "masked_score", masked_score(cudnn_version));

  // softmax_sum = rowsum(dO * O), the delta of the flash-attention backward.
  const std::int64_t product = g.pointwise("mul_dO_O", PointwiseMode::mul, d_o, o);
  const std::int64_t rowsum = g.reduce("reduce_dO_o", ReductionOp::add, product);
  g.pointwise("scale_dropout_inv", PointwiseMode::mul, rowsum, one, 0, softmax_sum);

  // P = exp(scale Q K^T - stats), masked; dV = P^T dO.
  const std::int64_t scores = g.matmul("matmul_Q_KT", q, kt);
  const std::int64_t scaled = g.pointwise("mul_s_attn_scale", PointwiseMode::mul, scores, scale);
  const std::int64_t centred = g.pointwise("sub_s_m", PointwiseMode::sub, scaled, stats);
  const std::int64_t visible = g.causal_mask(centred, masked);
  const std::int64_t probs = g.pointwise("exp_s", PointwiseMode::exp, visible);
  const Dims transposed_dims{c.b, 1, s, s}, transposed_strides{s * s, s * s, 1, s};
  const std::int64_t probs_t = g.reshape("reshape_p", probs, transposed_dims, transposed_strides, g.io());
  g.matmul("matmul_pT_dO", probs_t, d_o, dv);

  // dS = scale P (dO V^T - softmax_sum); dK = dS^T Q.
  const std::int64_t d_probs = g.matmul("matmul_dO_VT", d_o, vt);
  const std::int64_t centred_d = g.pointwise("sub_dP_softmax_sum", PointwiseMode::sub, d_probs, softmax_sum);
  const std::int64_t d_scores = g.pointwise("mul_dP_exp_s", PointwiseMode::mul, centred_d, probs);
  const std::int64_t d_scaled = g.pointwise("mul_dS_attn_scale", PointwiseMode::mul, d_scores, scale);
  const std::int64_t d_scaled_t = g.reshape("reshape_dS", d_scaled, transposed_dims, transposed_strides, g.io());
  g.matmul("matmul_dST_Q", d_scaled_t, q, dk);

  // dQ = dS K, with K read back from K^T's memory in rows (its strides swapped).
  const std::int64_t k_rows = g.reshape("reshape_k", kt, c.rows_dims(), c.rows_strides(), DataType::f32);
  g.matmul("matmul_dS_K", d_scaled, k_rows, dq);
  return g.take();
}

}  // namespace tessel::kernels::cuda::cudnn
