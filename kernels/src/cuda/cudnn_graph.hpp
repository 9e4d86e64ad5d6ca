// cuDNN's fused causal attention (SDPA) as plain data: the tensors and operation nodes of
// the forward and backward graphs the cuDNN backend API is given (cudnn_api.cpp emits
// them), built here without calling cuDNN so that tests can check and even evaluate them
// on a machine without a GPU. The constants mirror cudnn_graph.h (checked against it in
// cudnn_graph.cpp where the header is installed; tessel never needs it to build).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tessel::kernels::cuda::cudnn {

// cudnnBackendDescriptorType_t values tessel uses.
enum class DescriptorType : int {
  pointwise = 0,
  engine = 2,
  engine_config = 3,
  engine_heuristics = 4,
  execution_plan = 5,
  operation_pointwise = 13,
  operation_graph = 15,
  variant_pack = 16,
  tensor = 17,
  matmul = 18,
  operation_matmul = 19,
  reduction = 21,
  operation_reduction = 22,
  operation_reshape = 31,
};

// cudnnBackendAttributeType_t values tessel uses.
enum class AttributeType : int {
  handle = 0,
  data_type = 1,
  boolean = 2,
  int64 = 3,
  float32 = 4,
  void_ptr = 6,
  heur_mode = 8,
  pointwise_mode = 14,
  backend_descriptor = 15,
  reduction_operator = 18,
};

// cudnnBackendAttributeName_t values tessel uses.
enum class Attribute : int {
  pointwise_mode = 0,
  pointwise_math_prec = 1,
  pointwise_axis = 9,
  heur_mode = 200,
  heur_operation_graph = 201,
  heur_results = 202,
  heur_device_properties = 204,
  engine_config_engine = 300,
  plan_handle = 400,
  plan_engine_config = 401,
  plan_workspace_size = 402,
  plan_device_properties = 407,
  pointwise_pw_descriptor = 750,
  pointwise_x = 751,
  pointwise_b = 752,
  pointwise_y = 753,
  pointwise_alpha1 = 754,
  pointwise_alpha2 = 755,
  pointwise_t = 758,
  graph_handle = 800,
  graph_ops = 801,
  tensor_alignment = 900,
  tensor_data_type = 901,
  tensor_dims = 902,
  tensor_strides = 903,
  tensor_uid = 906,
  tensor_virtual = 907,
  tensor_by_value = 908,
  pack_uids = 1000,
  pack_pointers = 1001,
  pack_workspace = 1003,
  engine_global_index = 1301,
  matmul_comp_type = 1500,
  matmul_a = 1520,
  matmul_b = 1521,
  matmul_c = 1522,
  matmul_desc = 1523,
  reduction_operator = 1600,
  reduction_comp_type = 1601,
  reduction_x = 1610,
  reduction_y = 1611,
  reduction_desc = 1612,
  reshape_x = 2200,
  reshape_y = 2201,
};

// cudnnDataType_t, cudnnPointwiseMode_t and cudnnReduceTensorOp_t values tessel uses.
enum class DataType : int { f32 = 0, f16 = 2, i32 = 4, bf16 = 9, boolean = 11 };
enum class PointwiseMode : int {
  add = 0,
  mul = 1,
  div = 6,
  sub = 9,
  exp = 13,
  log = 15,
  cmp_ge = 303,
  gen_index = 501,
  binary_select = 601,
};
enum class ReductionOp : int { add = 0, max = 3 };
constexpr int kHeuristicsModeA = 3, kHeuristicsModeFallback = 2;  // cudnnBackendHeurMode_t
constexpr int kStatusSuccess = 0;                                   // CUDNN_STATUS_SUCCESS

// A tensor of the graph. Virtual tensors live only inside the fused kernel; the others
// are named in the variant pack by uid (by-value ones with a host pointer to `value`).
struct Tensor {
  std::int64_t uid = 0;
  std::string name;
  std::vector<std::int64_t> dims, strides;
  DataType type = DataType::f32;
  bool is_virtual = false;
  bool by_value = false;
  float value = 0.0f;  // by-value scalars only
};

enum class NodeKind { matmul, pointwise, reduction, reshape };

// One operation: x (matmul A), b (matmul B, second pointwise input), t (the select mask)
// and y (the output) are tensor uids, 0 where the node has no such port.
struct Node {
  NodeKind kind = NodeKind::pointwise;
  std::string name;
  PointwiseMode mode = PointwiseMode::add;
  ReductionOp reduction = ReductionOp::add;
  DataType compute = DataType::f32;
  std::int64_t axis = -1;  // gen_index only
  std::int64_t x = 0, b = 0, t = 0, y = 0;
};

struct Graph {
  std::vector<Tensor> tensors;  // every tensor a node names, each once
  std::vector<Node> nodes;      // in the order cuDNN is given them
  const Tensor& tensor(std::int64_t uid) const;  // throws tessel::Error for an unknown uid
  std::vector<std::int64_t> variant_pack_uids() const;  // the non-virtual tensors, in uid order
};

// The uids of the tensors a caller binds; virtual tensors are numbered from 100 on.
namespace uid {
constexpr std::int64_t q = 1, k = 2, v = 3, o = 4, stats = 5, d_o = 6, dq = 7, dk = 8, dv = 9, softmax_sum = 10,
                       scale = 11, one = 12, masked_score = 13;
}  // namespace uid

// One attention shape in tessel's heads layout: q, k, v, o [bh x seq x head_dim]
// contiguous, stats [bh x seq] fp32. cuDNN sees batch bh, one head.
struct SdpaShape {
  int bh = 0, seq = 0, head_dim = 0;
  DataType io = DataType::bf16;
  float scale = 1.0f;
};

// The value masked scores are set to: the lowest float before cuDNN 9.10, -infinity from
// then on (what cudnn-frontend's attn_score_modifiers.h gives each version).
float masked_score(std::size_t cudnn_version);

// O and the softmax stats (log-sum-exp of the scaled, masked scores) from Q, K, V.
Graph forward_graph(const SdpaShape& shape, std::size_t cudnn_version);
// dQ, dK, dV from Q, K, V, O, dO and the stats; softmax_sum (rowsum(dO * O), fp32
// [bh x seq]) is an intermediate cuDNN needs memory for. The deterministic form: dQ
// straight from its matrix product, no fp32 accumulator shared by thread blocks.
Graph backward_graph(const SdpaShape& shape, std::size_t cudnn_version);

}  // namespace tessel::kernels::cuda::cudnn
