// The routing decisions of an MoE MLP, computed on the host over the small [tokens x experts]
// router logits (the expert GEMMs stay on the backend): softmax, top-k (ties to the lower
// expert), Mixtral's renormalised gates, capacity and dropping in token order, the Switch/GShard
// auxiliary loss, and their backward. Stated once, so identical on every rank and tested alone
// (tests/executor/moe_test.cpp); each rule is deterministic.
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
