#include "tessel/core/op_comparison.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace tessel {

Spread spread_of(std::vector<double> values) {
  if (values.empty()) return {};
  std::sort(values.begin(), values.end());
  auto quantile = [&](double q) {
    const double at = q * double(values.size() - 1);
    const std::size_t below = std::size_t(at);
    const double above = below + 1 < values.size() ? values[below + 1] : values[below];
    return values[below] + (at - double(below)) * (above - values[below]);
  };
  return {values.front(), quantile(0.25), quantile(0.5), quantile(0.75), values.back()};
}

std::string op_kind(std::string_view op_id) {
  const std::size_t last = op_id.rfind('/');
  if (last == std::string_view::npos) return std::string(op_id);
  const std::size_t before = last == 0 ? std::string_view::npos : op_id.rfind('/', last - 1);
  const std::size_t from = before == std::string_view::npos ? 0 : before + 1;
  return std::string(op_id.substr(from, last - from)) + " " + std::string(op_id.substr(last + 1));
}

std::vector<OpKindComparison> compare_op_kinds(const std::vector<TimedOp>& predicted,
                                               const std::vector<std::vector<TimedOp>>& measured_steps) {
  std::map<std::string, OpKindComparison> kinds;
  auto kind_of = [&kinds](const TimedOp& op) -> OpKindComparison& {
    OpKindComparison& c = kinds[op_kind(op.id)];
    if (c.kind.empty()) {
      c.kind = op_kind(op.id);
      c.op = std::string(op.id.substr(op.id.rfind('/') + 1));
      c.stream = op.stream;
    }
    return c;
  };
  std::set<int> predicted_ranks, measured_ranks;
  for (const TimedOp& op : predicted) {
    kind_of(op).predicted_s += op.end_s - op.start_s;
    predicted_ranks.insert(op.rank);
  }
  std::map<std::string, std::vector<double>> per_step;  // kind -> seconds per measured step
  for (std::size_t step = 0; step < measured_steps.size(); ++step) {
    for (const TimedOp& op : measured_steps[step]) {
      std::vector<double>& seconds = per_step[kind_of(op).kind];
      seconds.resize(measured_steps.size(), 0.0);
      seconds[step] += op.end_s - op.start_s;
      measured_ranks.insert(op.rank);
    }
  }
  const double predicted_rank_count = std::max<double>(1, double(predicted_ranks.size()));
  const double measured_rank_count = std::max<double>(1, double(measured_ranks.size()));
  std::vector<OpKindComparison> out;
  for (auto& [name, c] : kinds) {
    c.predicted_s /= predicted_rank_count;
    std::vector<double> seconds = per_step[name], ratios;
    seconds.resize(measured_steps.size(), 0.0);  // a step without the kind measured it at zero
    for (double& s : seconds) {
      s /= measured_rank_count;
      if (c.predicted_s > 0) ratios.push_back(s / c.predicted_s);
    }
    c.measured_s = spread_of(seconds).median;
    c.ratio = spread_of(ratios);
    out.push_back(std::move(c));
  }
  std::sort(out.begin(), out.end(), [](const OpKindComparison& a, const OpKindComparison& b) {
    return a.measured_s - a.predicted_s > b.measured_s - b.predicted_s;
  });
  return out;
}

}  // namespace tessel
