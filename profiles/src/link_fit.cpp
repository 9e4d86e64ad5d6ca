#include "tessel/profiles/link_fit.hpp"

#include <algorithm>
#include <cmath>

namespace tessel::profiles {

std::optional<LinkFit> fit_link(const std::vector<LinkSample>& samples, const std::string& fabric,
                                CollectiveAlgorithm algorithm, std::optional<Collective> only) {
  // Minimise sum(((alpha*x1 + beta*x2) - t) / t)^2: normal equations in (alpha, beta).
  double s11 = 0, s12 = 0, s22 = 0, r1 = 0, r2 = 0;
  int count = 0;
  std::vector<const LinkSample*> used;
  for (const LinkSample& s : samples) {
    if (s.fabric != fabric || s.algorithm != algorithm || s.flagged) continue;
    if (only && s.collective != *only) continue;
    const double x1 = collective_steps(s.collective, s.ranks, algorithm) / s.seconds;
    const double x2 = s.bytes * bus_bandwidth_factor(s.collective, s.ranks) / s.seconds;
    if (x1 == 0 && x2 == 0) continue;
    s11 += x1 * x1, s12 += x1 * x2, s22 += x2 * x2, r1 += x1, r2 += x2;
    ++count;
    used.push_back(&s);
  }
  if (count < 2) return std::nullopt;
  const double det = s11 * s22 - s12 * s12;
  if (std::abs(det) <= 1e-12 * s11 * s22) return std::nullopt;
  double alpha = (r1 * s22 - r2 * s12) / det;
  double beta = (s11 * r2 - s12 * r1) / det;
  if (alpha < 0) {  // latency below resolution: fit bandwidth alone
    alpha = 0;
    beta = r2 / s22;
  }
  if (!(beta > 0)) return std::nullopt;
  LinkFit fit{alpha, 1.0 / beta, count, 0};
  for (const LinkSample* s : used) {
    const double predicted = alpha * collective_steps(s->collective, s->ranks, algorithm) +
                             beta * s->bytes * bus_bandwidth_factor(s->collective, s->ranks);
    fit.max_relative_error = std::max(fit.max_relative_error, std::abs(predicted - s->seconds) / s->seconds);
  }
  return fit;
}

}  // namespace tessel::profiles
