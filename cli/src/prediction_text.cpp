// Text and JSON forms of a prediction's band and experience flag (prediction_text.hpp).
#include "prediction_text.hpp"

#include <fmt/format.h>

#include "format.hpp"
#include "tessel/planner/prediction_judgement.hpp"

namespace tessel::cli {

std::string band_cell(const profiles::PredictionJudgement& judgement) {
  if (!judgement.band_s) return "-";
  return format_seconds(judgement.band_s->first) + ".." + format_seconds(judgement.band_s->second);
}

std::string band_line(const profiles::PredictionJudgement& judgement) {
  if (!judgement.band_s) return "no band: " + judgement.no_band_reason;
  return fmt::format(
      "{:.0f}% band {}: measured/predicted {:.2f}-{:.2f} ({:.0f}th-{:.0f}th percentile of {} "
      "{}{} errors)",
      100 * (profiles::kBandUpperQuantile - profiles::kBandLowerQuantile), band_cell(judgement),
      1 / (1 + judgement.band->high_residual), 1 / (1 + judgement.band->low_residual),
      100 * profiles::kBandLowerQuantile, 100 * profiles::kBandUpperQuantile, judgement.band->runs,
      judgement.band_source == "simulated" ? "simulated " : "", judgement.band->kind);
}

std::string mfu_cell(const profiles::PredictionJudgement& judgement) {
  return fmt::format("{:.1f}%{}", 100 * judgement.mfu, judgement.flagged() ? "!" : "");
}

void add_judgement(Json& out, const profiles::PredictionJudgement& judgement) {
  const Json fields = judgement.to_json();
  out.update(fields);
}

std::string plans_judgement_text(const std::vector<planner::Estimate>& plans, const planner::CostModel& model) {
  const auto best = planner::judge_prediction(model, plans.front());
  std::string text = band_line(best) + "\nrank 1: " + best.experience_line() + "\n";
  std::size_t flagged = 0;
  for (const planner::Estimate& e : plans) flagged += planner::judge_prediction(model, e).flagged() ? 1 : 0;
  if (flagged > 0) {
    text +=
        fmt::format("{} of the {} plans shown are outside measured experience (MFU marked !)\n", flagged, plans.size());
  }
  return text;
}

void add_plans_judgement(Json& plans_json, const std::vector<planner::Estimate>& plans, const planner::CostModel& model,
                         const std::vector<double>& simulated) {
  for (std::size_t i = 0; i < plans.size(); ++i)
    add_judgement(plans_json[i], planner::judge_prediction(model, plans[i]));
  for (std::size_t i = 0; i < simulated.size() && i < plans.size(); ++i) {
    plans_json[i]["simulated_step_time_s"] = simulated[i];
    const auto band = planner::judge_simulated_prediction(model, simulated[i], plans[i].mfu).band_s;
    plans_json[i]["simulated_step_time_band_s"] = band ? Json::array({band->first, band->second}) : Json();
  }
}

}  // namespace tessel::cli
