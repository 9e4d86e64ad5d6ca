#include "tessel/core/memory_comparison.hpp"

#include <algorithm>

namespace tessel {

namespace {
constexpr std::array<std::string_view, kMemoryCategories> kNames = {"parameters", "gradients", "optimizer",
                                                                   "activations", "workspace"};

std::optional<double> ratio_of(double measured, double predicted) {
  if (predicted <= 0) return std::nullopt;
  return measured / predicted;
}

Json by_category(const MemoryBytes& bytes) {
  Json out = Json::object();
  for (std::size_t c = 0; c < kMemoryCategories; ++c) out[std::string(kNames[c])] = bytes[c];
  return out;
}

Json optional_json(std::optional<double> value) { return value ? Json(*value) : Json(nullptr); }
Json known_json(double value) { return value > 0 ? Json(value) : Json(nullptr); }
}  // namespace

std::string_view to_string(MemoryCategory category) { return kNames[std::size_t(category)]; }

std::optional<MemoryCategory> memory_category_from_string(std::string_view name) {
  for (std::size_t c = 0; c < kMemoryCategories; ++c) {
    if (kNames[c] == name) return MemoryCategory(c);
  }
  return std::nullopt;
}

double RankMemoryComparison::runtime_overhead_bytes() const {
  const double outside = measured.device_peak_bytes > 0 ? measured.device_peak_bytes
                                                        : measured.process_peak_bytes - measured.host_state_bytes;
  return std::max(0.0, outside - measured.total_peak_bytes);
}

double RankMemoryComparison::measured_bytes(MemoryCategory category) const {
  const double ledger = measured.peak_bytes[std::size_t(category)];
  return category == MemoryCategory::workspace ? ledger + runtime_overhead_bytes() : ledger;
}

std::optional<double> RankMemoryComparison::ratio(MemoryCategory category) const {
  return ratio_of(measured_bytes(category), predicted_bytes[std::size_t(category)]);
}

std::optional<double> RankMemoryComparison::total_ratio() const {
  return ratio_of(measured_total_bytes(), predicted_total_bytes());
}

Json memory_comparison_json(const std::vector<RankMemoryComparison>& ranks) {
  Json out{{"categories", Json::array()}, {"ranks", Json::array()}};
  for (std::string_view name : kNames) out["categories"].push_back(name);
  double predicted_peak = 0, measured_peak = 0;
  for (const RankMemoryComparison& r : ranks) {
    MemoryBytes compared{};
    for (std::size_t c = 0; c < kMemoryCategories; ++c) compared[c] = r.measured_bytes(MemoryCategory(c));
    Json ratio = Json::object();
    for (std::size_t c = 0; c < kMemoryCategories; ++c) ratio[std::string(kNames[c])] = optional_json(r.ratio(MemoryCategory(c)));
    ratio["total"] = optional_json(r.total_ratio());
    out["ranks"].push_back({{"rank", r.rank},
                            {"stage", r.stage},
                            {"predicted_bytes", by_category(r.predicted_bytes)},
                            {"predicted_total_bytes", r.predicted_total_bytes()},
                            {"measured_peak_bytes", by_category(compared)},
                            {"measured_at_total_peak_bytes", by_category(r.measured.at_total_peak_bytes)},
                            {"measured_tensor_peak_bytes", r.measured.total_peak_bytes},
                            {"runtime_overhead_bytes", r.runtime_overhead_bytes()},
                            {"measured_total_peak_bytes", r.measured_total_bytes()},
                            {"ratio", ratio},
                            {"predicted_host_bytes", known_json(r.predicted_host_bytes)},
                            {"measured_host_bytes", known_json(r.measured.host_state_bytes)},
                            {"host_ratio", optional_json(ratio_of(r.measured.host_state_bytes, r.predicted_host_bytes))},
                            {"device_peak_bytes", known_json(r.measured.device_peak_bytes)},
                            {"process_peak_bytes", known_json(r.measured.process_peak_bytes)}});
    predicted_peak = std::max(predicted_peak, r.predicted_total_bytes());
    measured_peak = std::max(measured_peak, r.measured_total_bytes());
  }
  out["predicted_peak_bytes"] = predicted_peak;
  out["measured_peak_bytes"] = measured_peak;
  out["peak_ratio"] = optional_json(ratio_of(measured_peak, predicted_peak));
  return out;
}

}  // namespace tessel
