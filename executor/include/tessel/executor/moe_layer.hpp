// A Mixture-of-Experts MLP as one unit, between its block's norm and residual: router GEMM,
// routing (moe_routing.hpp), dispatch, expert MLPs, combine, shared experts and their backward.
// Apart from the dense block so it is checked alone (finite differences, dropping, ep equal to
// one process: tests/executor/moe_test.cpp) before a layout wires it in. Expert and 1D tensor
// parallelism, and how gradients sum: docs/EXECUTOR.md. Ops are timed as `id_prefix` + name.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tessel/executor/buffer.hpp"
#include "tessel/executor/comm/communicator.hpp"
#include "tessel/executor/moe_routing.hpp"
#include "tessel/executor/op_timeline.hpp"

namespace tessel::executor {

struct MoeShape {
  int hidden = 0;
  int experts = 0, top_k = 0;
  int expert_ffn = 0;       // f of one expert
  int shared_ffn = 0;       // shared_experts x expert_ffn (0: none)
  bool swiglu = false;      // else gelu
  double capacity_factor = 0;
  float aux_coefficient = 0.01f;
};

// The weights of one call: `dense` holds the router [H x E] then the shared experts' fc1
// and fc2; `experts` this rank's local experts, each fc1 then fc2 (a layout keeps the two
// in different buckets: the experts sync over the expert-data-parallel group).
struct MoeWeights {
  const float* dense = nullptr;
  const float* experts = nullptr;
};
struct MoeGradients {
  float* dense = nullptr;
  float* experts = nullptr;
};

// The bytes this rank's all-to-alls sent so far (nccl-tests size: its own block included),
// by side. The token side (forward dispatch, backward combine) sends its top_k x tokens
// kept rows: without drops, the Program's bytes exactly. The expert side returns what its
// experts received, which depends on the routing: the Program's bytes only summed over the
// ep group (ep x them). gate_grad_bytes: moe.gate_grad's all-reduces, one f32 per kept row.
struct MoeTraffic {
  double token_side_bytes = 0, expert_side_bytes = 0, gate_grad_bytes = 0;
};

// What the backward needs from the forward of one call.
struct MoeActivations {
  MoeRouting routing;
  std::vector<std::size_t> send_rows, recv_rows;  // rows to / from each ep rank
  std::vector<int> block_rows;                    // [ep ranks x local experts] rows received
  Buffer expert_in, expert_pre, expert_act;       // local experts' rows, grouped by expert
  Buffer returned;                                // expert outputs back here, in expert order
  Buffer shared_pre, shared_act;
  // The routing in backend memory, for the row gathers: row_token, slot (int32), the
  // assignments' gates and each row's gate (fp32).
  Buffer row_token, slot, gate, row_gate;
};

class MoeLayer {
 public:
  MoeLayer(kernels::Backend& backend, MoeShape shape, Communicator& ep, OpTimeline& timeline,
           Communicator* tensor = nullptr);

  const MoeShape& shape() const { return shape_; }
  int local_experts() const { return shape_.experts / ep_.size(); }
  int first_expert() const { return ep_.rank() * local_experts(); }
  int fc1_width() const { return shape_.swiglu ? 2 * shape_.expert_ffn : shape_.expert_ffn; }
  int shared_fc1_width() const { return shape_.swiglu ? 2 * shape_.shared_ffn : shape_.shared_ffn; }

  // This rank's parameters, one fp32 array: router [H x E], shared fc1, shared fc2, then
  // each local expert's fc1 and fc2.
  std::size_t router_size() const { return std::size_t(shape_.hidden) * std::size_t(shape_.experts); }
  std::size_t shared_size() const;
  std::size_t expert_size() const;  // one expert's fc1 + fc2
  std::size_t expert_offset(int local_expert) const {
    return router_size() + shared_size() + std::size_t(local_expert) * expert_size();
  }
  std::size_t parameter_count() const { return expert_offset(local_experts()); }
  std::size_t dense_size() const { return router_size() + shared_size(); }  // MoeWeights::dense

  // y [tokens x H] = MoE(x [tokens x H]); returns the auxiliary loss (already x coefficient).
  // The one-array forms take the weights as parameter_count() lays them out.
  double forward(const std::string& id_prefix, const MoeWeights& weights, const Buffer& x, int tokens, Buffer& y,
                 MoeActivations& a);
  double forward(const std::string& id_prefix, const float* params, const Buffer& x, int tokens, Buffer& y,
                 MoeActivations& a) {
    return forward(id_prefix, MoeWeights{params, params + dense_size()}, x, tokens, y, a);
  }
  // dx = d(loss)/dx (overwritten); grads += d(loss)/d(params). The auxiliary loss enters
  // the loss multiplied by aux_loss_scale (the caller's loss scale, e.g. 1 / micro-batches).
  void backward(const std::string& id_prefix, const MoeWeights& weights, const MoeGradients& grads, const Buffer& x,
                MoeActivations& a, const Buffer& dy, Buffer& dx, float aux_loss_scale);
  void backward(const std::string& id_prefix, const float* params, float* grads, const Buffer& x,
                MoeActivations& a, const Buffer& dy, Buffer& dx, float aux_loss_scale) {
    backward(id_prefix, MoeWeights{params, params + dense_size()}, MoeGradients{grads, grads + dense_size()}, x, a,
             dy, dx, aux_loss_scale);
  }
  const MoeTraffic& traffic() const { return traffic_; }

 private:
  // The routing's row maps and gates into backend memory (MoeActivations).
  void upload_routing(MoeActivations& a);
  // The per-(rank, local expert) row counts, exchanged once per forward.
  void exchange_counts(MoeActivations& a);
  // From the token side to the experts' ranks (forward dispatch, backward combine), and back.
  void move_to_experts(const Buffer& token_rows, const MoeActivations& a, Buffer& expert_rows);
  void move_to_tokens(const Buffer& expert_rows, const MoeActivations& a, Buffer& token_rows);
  // One all-to-all of whole hidden rows over the ep group; the bytes sent are added to `sent_bytes`.
  void exchange_rows(const Buffer& from, const std::vector<std::size_t>& send_rows,
                     const std::vector<std::size_t>& recv_rows, Buffer& to, double& sent_bytes);
  // Local expert `le`'s fc1 in MoeWeights::experts (its fc2 follows).
  std::size_t local_expert_offset(int le) const { return std::size_t(le) * expert_size(); }
  // Each local expert's rows (summed over source ranks) and where they start in expert order.
  struct ExpertRowSpans {
    std::vector<int> rows, first;
    int total = 0;
  };
  ExpertRowSpans expert_row_spans(const MoeActivations& a) const;
  // Rows in this rank's expert order -> the local experts' rows (grouped by expert, then
  // by source rank), and back.
  void reorder_blocks(const Buffer& from, Buffer& to, const MoeActivations& a, bool rank_major_to_expert_major);
  void experts_forward(const std::string& id_prefix, const float* experts, MoeActivations& a, Buffer& out);
  void experts_backward(const std::string& id_prefix, const float* experts, float* grads, MoeActivations& a,
                        const Buffer& dout, Buffer& din);
  // out [rows x out_width] = in W (+ beta out); W stored [in_width x out_width].
  void linear(CRef in, const float* weight, int rows, int in_width, int out_width, Ref out, float beta);
  // din = dout W^T (+ beta din; skipped when !input_gradient); dW += in^T dout.
  void linear_backward(CRef in, const float* weight, float* weight_grad, CRef dout, int rows, int in_width,
                       int out_width, Ref din, float beta, bool input_gradient = true);
  void activation_forward(CRef pre, Ref act, int rows, int ffn);
  void activation_backward(CRef pre, CRef dact, Ref dpre, int rows, int ffn);

  kernels::Backend& backend_;
  MoeShape shape_;
  Communicator& ep_;
  OpTimeline& timeline_;
  Communicator* tensor_;  // the 1D tensor-parallel group; null: none
  MoeTraffic traffic_;
  // Work buffers, kept across calls.
  Buffer pack_, unpack_, token_rows_, expert_out_, expert_grad_, dact_, dpre_, delta_, logits_, counts_;
};

}  // namespace tessel::executor
