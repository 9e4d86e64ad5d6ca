// The routing decisions of a Mixture-of-Experts MLP, computed on the host over the small
// [tokens x experts] router logits (the expert GEMMs, which carry the cost, stay on the
// backend): softmax, top-k, gate renormalisation, capacity and token dropping, the
// auxiliary load-balancing loss, and the backward of all of it to the router logits.
// Kept apart from the layer so that the rules are stated once, tested on their own
// (tests/executor/moe_test.cpp) and identical on every rank.
//
// The rules, each deterministic:
//   - probabilities p[t] = softmax(logits[t]) in fp32 (max-subtracted, summed in expert order);
//   - top-k: the k largest p[t][e], ties broken by the lower expert index; a token's
//     choices are kept in that order (choice 0 the largest);
//   - gates: Mixtral's convention, renormalised over the k chosen: g = p / sum of the k p;
//   - capacity = ceil(capacity_factor * tokens * top_k / experts), capacity_factor 0 = no
//     limit. Tokens are the ones this call routes (one rank's micro-batch, the way
//     Megatron-Core and DeepSpeed count them). Assignments are taken in token index
//     order, each token's choices in choice order; one whose expert is already full is
//     dropped: it adds nothing to the output and its gate is not spread to the others;
//   - auxiliary loss (Switch Transformer / GShard form):
//     coefficient * experts * sum_e f_e * P_e, f_e = the share of the tokens x top_k
//     assignments chosen for expert e (before dropping), P_e = the mean of p[t][e] over the
//     tokens. f_e is a count and carries no gradient; the coefficient is the caller's
//     (TrainerOptions::moe_aux_coefficient, default 0.01).
#pragma once

#include <cstdint>
#include <vector>

namespace tessel::executor {

struct MoeRouting {
  int tokens = 0, experts = 0, top_k = 0;
  int capacity = 0;                   // per expert; tokens * top_k when there is no limit
  std::vector<float> probabilities;   // [tokens x experts]
  std::vector<std::int32_t> choice;   // [tokens x top_k]: expert of each choice
  std::vector<float> gate;            // [tokens x top_k]: renormalised gate
  std::vector<std::uint8_t> kept;     // [tokens x top_k]: 1 unless dropped
  std::vector<std::int32_t> slot;     // [tokens x top_k]: row in expert order, -1 when dropped
  std::vector<int> expert_rows;       // [experts]: kept assignments per expert
  std::vector<int> expert_first_row;  // [experts]: first row of each expert (expert order)
  std::vector<std::int32_t> row_token;  // [kept rows]: the token of each row in expert order
  std::vector<float> chosen_share;    // f_e
  double aux_loss = 0;                // coefficient x experts x sum f_e P_e
  float aux_coefficient = 0;
  int dropped = 0;
};

// Rows in expert order are grouped by expert (expert index order) and, inside an
// expert, in the order the assignments were taken (token index order).
MoeRouting route_tokens(const std::vector<float>& logits, int tokens, int experts, int top_k,
                        double capacity_factor, float aux_coefficient);

int moe_capacity(int tokens, int experts, int top_k, double capacity_factor);

// d(loss)/d(logits) [tokens x experts] from d(loss)/d(gate) [tokens x top_k] (0 where
// dropped) plus the auxiliary loss's own gradient (scaled by aux_loss_scale, the factor
// the caller applies to the loss, e.g. 1 / micro-batches).
std::vector<float> route_backward(const MoeRouting& routing, const std::vector<float>& gate_gradient,
                                  float aux_loss_scale);

}  // namespace tessel::executor
