// The routing rules of moe_routing.hpp. Every loop runs in a fixed order (tokens, then
// experts or choices), so the same logits give the same routing bits on every rank.
#include "tessel/executor/moe_routing.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::executor {

int moe_capacity(int tokens, int experts, int top_k, double capacity_factor) {
  if (capacity_factor <= 0) return tokens * top_k;  // no limit
  const double wanted = std::ceil(capacity_factor * double(tokens) * double(top_k) / double(experts));
  return int(std::min<double>(wanted, double(tokens) * top_k));
}

namespace {

void softmax_rows(const std::vector<float>& logits, int tokens, int experts, std::vector<float>& p) {
  p.resize(std::size_t(tokens) * std::size_t(experts));
  for (int t = 0; t < tokens; ++t) {
    const float* row = logits.data() + std::size_t(t) * std::size_t(experts);
    float* out = p.data() + std::size_t(t) * std::size_t(experts);
    float top = row[0];
    for (int e = 1; e < experts; ++e) top = std::max(top, row[e]);
    float sum = 0;
    for (int e = 0; e < experts; ++e) sum += (out[e] = std::exp(row[e] - top));
    for (int e = 0; e < experts; ++e) out[e] /= sum;
  }
}

// The k best experts of one token: larger probability first, lower index on ties.
void top_k_of(const float* p, int experts, int top_k, std::int32_t* chosen) {
  std::vector<std::int32_t> order(static_cast<std::size_t>(experts));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [p](std::int32_t a, std::int32_t b) {
    return p[a] != p[b] ? p[a] > p[b] : a < b;
  });
  std::copy(order.begin(), order.begin() + top_k, chosen);
}

}  // namespace

MoeRouting route_tokens(const std::vector<float>& logits, int tokens, int experts, int top_k,
                        double capacity_factor, float aux_coefficient) {
  if (experts <= 0 || top_k <= 0 || top_k > experts) {
    throw Error(fmt::format("moe: top_k must be between 1 and experts ({}), got {}", experts, top_k));
  }
  if (logits.size() != std::size_t(tokens) * std::size_t(experts)) {
    throw Error(fmt::format("internal: moe router logits hold {} values, not {} tokens x {} experts", logits.size(),
                            tokens, experts));
  }
  MoeRouting r;
  r.tokens = tokens, r.experts = experts, r.top_k = top_k, r.aux_coefficient = aux_coefficient;
  r.capacity = moe_capacity(tokens, experts, top_k, capacity_factor);
  softmax_rows(logits, tokens, experts, r.probabilities);
  const std::size_t assignments = std::size_t(tokens) * std::size_t(top_k);
  r.choice.resize(assignments), r.gate.resize(assignments), r.kept.assign(assignments, 0);
  r.slot.assign(assignments, -1);
  std::vector<int> taken(std::size_t(experts), 0), chosen_count(std::size_t(experts), 0);
  for (int t = 0; t < tokens; ++t) {
    const float* p = r.probabilities.data() + std::size_t(t) * std::size_t(experts);
    std::int32_t* chosen = r.choice.data() + std::size_t(t) * std::size_t(top_k);
    top_k_of(p, experts, top_k, chosen);
    float chosen_sum = 0;
    for (int j = 0; j < top_k; ++j) chosen_sum += p[chosen[j]];
    for (int j = 0; j < top_k; ++j) {
      const std::size_t a = std::size_t(t) * std::size_t(top_k) + std::size_t(j);
      const int e = chosen[j];
      r.gate[a] = p[e] / chosen_sum;
      ++chosen_count[std::size_t(e)];
      if (taken[std::size_t(e)] < r.capacity) {
        r.kept[a] = 1;
        ++taken[std::size_t(e)];
      } else {
        ++r.dropped;
      }
    }
  }
  // Rows in expert order: expert by expert, token order inside (a second pass in the
  // same order as the taking above).
  r.expert_rows = taken;
  r.expert_first_row.assign(std::size_t(experts), 0);
  for (int e = 1; e < experts; ++e) {
    r.expert_first_row[std::size_t(e)] = r.expert_first_row[std::size_t(e - 1)] + taken[std::size_t(e - 1)];
  }
  std::vector<int> next = r.expert_first_row;
  r.row_token.assign(std::size_t(std::accumulate(taken.begin(), taken.end(), 0)), -1);
  for (std::size_t a = 0; a < assignments; ++a) {
    if (!r.kept[a]) continue;
    const int row = next[std::size_t(r.choice[a])]++;
    r.slot[a] = row;
    r.row_token[std::size_t(row)] = std::int32_t(a / std::size_t(top_k));
  }
  // Auxiliary load-balancing loss.
  r.chosen_share.assign(std::size_t(experts), 0.0f);
  double balance = 0;
  for (int e = 0; e < experts; ++e) {
    double mean_p = 0;
    for (int t = 0; t < tokens; ++t) mean_p += r.probabilities[std::size_t(t) * std::size_t(experts) + std::size_t(e)];
    mean_p /= std::max(tokens, 1);
    r.chosen_share[std::size_t(e)] = float(double(chosen_count[std::size_t(e)]) / double(std::max<std::size_t>(assignments, 1)));
    balance += double(r.chosen_share[std::size_t(e)]) * mean_p;
  }
  r.aux_loss = double(aux_coefficient) * experts * balance;
  return r;
}

std::vector<float> route_backward(const MoeRouting& r, const std::vector<float>& gate_gradient,
                                  float aux_loss_scale) {
  const int E = r.experts, k = r.top_k;
  std::vector<float> dlogits(std::size_t(r.tokens) * std::size_t(E), 0.0f);
  std::vector<float> dp(static_cast<std::size_t>(E));
  // d(aux)/d(p[t][e]) = coefficient * experts * f_e / tokens.
  const float aux_factor = r.aux_coefficient * float(E) * aux_loss_scale / float(std::max(r.tokens, 1));
  for (int t = 0; t < r.tokens; ++t) {
    const float* p = r.probabilities.data() + std::size_t(t) * std::size_t(E);
    for (int e = 0; e < E; ++e) dp[std::size_t(e)] = aux_factor * r.chosen_share[std::size_t(e)];
    // Through the renormalisation g_j = p_j / S: dp_j += (dg_j - sum_i g_i dg_i) / S.
    const std::size_t first = std::size_t(t) * std::size_t(k);
    float chosen_sum = 0, weighted = 0;
    for (int j = 0; j < k; ++j) {
      chosen_sum += p[r.choice[first + std::size_t(j)]];
      weighted += r.gate[first + std::size_t(j)] * gate_gradient[first + std::size_t(j)];
    }
    for (int j = 0; j < k; ++j) {
      dp[std::size_t(r.choice[first + std::size_t(j)])] += (gate_gradient[first + std::size_t(j)] - weighted) / chosen_sum;
    }
    // Softmax: dlogit_e = p_e (dp_e - sum_i p_i dp_i).
    float dot = 0;
    for (int e = 0; e < E; ++e) dot += p[e] * dp[std::size_t(e)];
    float* out = dlogits.data() + std::size_t(t) * std::size_t(E);
    for (int e = 0; e < E; ++e) out[e] = p[e] * (dp[std::size_t(e)] - dot);
  }
  return dlogits;
}

}  // namespace tessel::executor
