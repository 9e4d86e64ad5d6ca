// The MoE MLP of moe_layer.hpp. Forward: router -> routing on the host -> gather rows in
// expert order -> all-to-all to the experts' ranks -> expert GEMMs -> all-to-all back ->
// combine weighted by the gates in token order -> shared experts. The backward walks the
// same path in reverse; the only host arithmetic is the routing (moe_routing.cpp).
#include "tessel/executor/moe_layer.hpp"

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/core/op_names.hpp"

namespace tessel::executor {

namespace {
constexpr Stream kCompute = Stream::compute;
CRef f32_cref(const float* p) { return {p, DType::f32}; }
Ref f32_ref(float* p) { return {p, DType::f32}; }
}  // namespace

MoeLayer::MoeLayer(kernels::Backend& backend, MoeShape shape, Communicator& ep, OpTimeline& timeline,
                   Communicator* tensor)
    : backend_(backend), shape_(shape), ep_(ep), timeline_(timeline), tensor_(tensor && tensor->size() > 1 ? tensor : nullptr) {
  if (shape_.experts <= 0 || shape_.experts % ep_.size() != 0) {
    throw Error(fmt::format("moe: {} experts cannot be sharded over ep {} (ep must divide experts)", shape_.experts,
                            ep_.size()));
  }
  for (Buffer* b : {&pack_, &unpack_, &token_rows_, &expert_out_, &expert_grad_, &dact_, &dpre_, &delta_, &logits_}) {
    b->bind(backend_, DType::f32);
  }
  counts_.bind(backend_, DType::i32);
}

std::size_t MoeLayer::shared_size() const {
  return std::size_t(shape_.hidden) * std::size_t(shared_fc1_width() + shape_.shared_ffn);
}

std::size_t MoeLayer::expert_size() const {
  return std::size_t(shape_.hidden) * std::size_t(fc1_width() + shape_.expert_ffn);
}

void MoeLayer::linear(CRef in, const float* weight, int rows, int in_width, int out_width, Ref out, float beta) {
  if (rows == 0) return;
  kernels::Gemm g;
  g.m = rows, g.n = out_width, g.k = in_width, g.a = in, g.b = f32_cref(weight), g.c = out, g.beta = beta;
  backend_.gemm(kCompute, g);
}

void MoeLayer::linear_backward(CRef in, const float* weight, float* weight_grad, CRef dout, int rows, int in_width,
                               int out_width, Ref din, float beta, bool input_gradient) {
  if (rows == 0) return;
  if (input_gradient) {
    kernels::Gemm input;
    input.transpose_b = true, input.m = rows, input.n = in_width, input.k = out_width;
    input.a = dout, input.b = f32_cref(weight), input.c = din, input.beta = beta;
    backend_.gemm(kCompute, input);
  }
  kernels::Gemm weights;
  weights.transpose_a = true, weights.m = in_width, weights.n = out_width, weights.k = rows;
  weights.a = in, weights.b = dout, weights.c = f32_ref(weight_grad), weights.beta = 1.0f;
  backend_.gemm(kCompute, weights);
}

void MoeLayer::activation_forward(CRef pre, Ref act, int rows, int ffn) {
  if (rows == 0) return;
  if (shape_.swiglu) {
    backend_.swiglu_forward(kCompute, pre, act, rows, ffn);
  } else {
    backend_.gelu_forward(kCompute, pre, act, std::int64_t(rows) * ffn);
  }
}

void MoeLayer::activation_backward(CRef pre, CRef dact, Ref dpre, int rows, int ffn) {
  if (rows == 0) return;
  if (shape_.swiglu) {
    backend_.swiglu_backward(kCompute, pre, dact, dpre, rows, ffn);
  } else {
    backend_.gelu_backward(kCompute, pre, dact, dpre, std::int64_t(rows) * ffn);
  }
}

void MoeLayer::upload_routing(MoeActivations& a) {
  const MoeRouting& r = a.routing;
  std::vector<float> row_gate(r.row_token.size(), 0.0f);
  for (std::size_t assignment = 0; assignment < r.slot.size(); ++assignment) {
    if (r.slot[assignment] >= 0) row_gate[std::size_t(r.slot[assignment])] = r.gate[assignment];
  }
  a.row_token.bind(backend_, DType::i32), a.slot.bind(backend_, DType::i32);
  a.gate.bind(backend_, DType::f32), a.row_gate.bind(backend_, DType::f32);
  a.row_token.upload(r.row_token);
  a.slot.upload(r.slot);
  a.gate.upload(r.gate);
  a.row_gate.upload(row_gate);
}

void MoeLayer::exchange_counts(MoeActivations& a) {
  const int ranks = ep_.size(), local = local_experts();
  std::vector<std::int32_t> mine(std::size_t(shape_.experts));
  for (int e = 0; e < shape_.experts; ++e) mine[std::size_t(e)] = a.routing.expert_rows[std::size_t(e)];
  counts_.upload(mine);
  Buffer received(backend_, DType::i32, mine.size());
  ep_.all_to_all(counts_.data(), received.data(), std::size_t(local), DType::i32);
  std::vector<std::int32_t> got(mine.size());
  backend_.download(kCompute, got.data(), received.data(), received.bytes());
  backend_.synchronize(kCompute);
  a.block_rows.assign(got.size(), 0);
  a.send_rows.assign(std::size_t(ranks), 0);
  a.recv_rows.assign(std::size_t(ranks), 0);
  for (int q = 0; q < ranks; ++q) {
    for (int le = 0; le < local; ++le) {
      const std::size_t block = std::size_t(q * local + le);
      a.block_rows[block] = int(got[block]);
      a.recv_rows[std::size_t(q)] += std::size_t(a.block_rows[block]);
      a.send_rows[std::size_t(q)] += std::size_t(a.routing.expert_rows[block]);  // expert q*local + le
    }
  }
}

// Blocks (source rank q, local expert le) of block_rows[q][le] rows: rank-major is the
// order the all-to-all delivers, expert-major the order the expert GEMMs read.
void MoeLayer::reorder_blocks(const Buffer& from, Buffer& to, const MoeActivations& a, bool rank_major_to_expert_major) {
  const int ranks = ep_.size(), local = local_experts();
  const std::size_t row_bytes = std::size_t(shape_.hidden) * sizeof(float);
  std::vector<std::size_t> rank_major(static_cast<std::size_t>(ranks * local)), expert_major(static_cast<std::size_t>(ranks * local));
  std::size_t at = 0, total = 0;
  for (int q = 0; q < ranks; ++q) {
    for (int le = 0; le < local; ++le) rank_major[std::size_t(q * local + le)] = at, at += std::size_t(a.block_rows[std::size_t(q * local + le)]);
  }
  for (int le = 0; le < local; ++le) {
    for (int q = 0; q < ranks; ++q) expert_major[std::size_t(q * local + le)] = total, total += std::size_t(a.block_rows[std::size_t(q * local + le)]);
  }
  to.resize(total * std::size_t(shape_.hidden));
  for (std::size_t b = 0; b < rank_major.size(); ++b) {
    const std::size_t rows = std::size_t(a.block_rows[b]);
    if (rows == 0) continue;
    const std::size_t src = rank_major_to_expert_major ? rank_major[b] : expert_major[b];
    const std::size_t dst = rank_major_to_expert_major ? expert_major[b] : rank_major[b];
    backend_.copy(kCompute, static_cast<char*>(to.data()) + dst * row_bytes,
                  static_cast<const char*>(from.data()) + src * row_bytes, rows * row_bytes);
  }
}

void MoeLayer::exchange_rows(const Buffer& from, const std::vector<std::size_t>& send_rows,
                             const std::vector<std::size_t>& recv_rows, Buffer& to, double& sent_bytes) {
  const std::size_t h = std::size_t(shape_.hidden);
  std::vector<std::size_t> send(send_rows.size()), recv(recv_rows.size());
  std::size_t incoming = 0, outgoing = 0;
  for (std::size_t q = 0; q < send.size(); ++q) {
    send[q] = send_rows[q] * h, recv[q] = recv_rows[q] * h, incoming += recv[q], outgoing += send[q];
  }
  sent_bytes += double(outgoing) * sizeof(float);
  to.resize(incoming);
  ep_.all_to_all_v(from.data(), send, to.data(), recv, DType::f32);
}

void MoeLayer::move_to_experts(const Buffer& token_rows, const MoeActivations& a, Buffer& expert_rows) {
  exchange_rows(token_rows, a.send_rows, a.recv_rows, unpack_, traffic_.token_side_bytes);
  reorder_blocks(unpack_, expert_rows, a, true);
}

void MoeLayer::move_to_tokens(const Buffer& expert_rows, const MoeActivations& a, Buffer& token_rows) {
  reorder_blocks(expert_rows, pack_, a, false);
  exchange_rows(pack_, a.recv_rows, a.send_rows, token_rows, traffic_.expert_side_bytes);
}

}  // namespace tessel::executor
