// Text and JSON forms of a prediction's band and experience flag (prediction_text.hpp).
#include "prediction_text.hpp"

#include <fmt/format.h>

#include "format.hpp"

namespace tessel::cli {

std::string band_cell(const profiles::PredictionJudgement& judgement) {
  if (!judgement.band_s) return "-";
  return format_seconds(judgement.band_s->first) + ".." + format_seconds(judgement.band_s->second);
}

std::string band_line(const profiles::PredictionJudgement& judgement) {
  if (!judgement.band_s) return "no band: " + judgement.no_band_reason;
  return fmt::format(
      "{:.0f}% band {}: measured/predicted {:.2f}-{:.2f} ({:.0f}th-{:.0f}th percentile of {} "
      "leave-one-out errors)",
      100 * (profiles::kBandUpperQuantile - profiles::kBandLowerQuantile), band_cell(judgement),
      1 / (1 + judgement.band->high_residual), 1 / (1 + judgement.band->low_residual),
      100 * profiles::kBandLowerQuantile, 100 * profiles::kBandUpperQuantile, judgement.band->runs);
}

std::string mfu_cell(const profiles::PredictionJudgement& judgement) {
  return fmt::format("{:.1f}%{}", 100 * judgement.mfu, judgement.flagged() ? "!" : "");
}

void add_judgement(Json& out, const profiles::PredictionJudgement& judgement) {
  const Json fields = judgement.to_json();
  out.update(fields);
}

}  // namespace tessel::cli
