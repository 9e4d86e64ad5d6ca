// How the CLI prints a prediction's error band and its measured-experience flag
// (profiles/prediction_bounds.hpp), the same way in `plan`, `estimate` and `simulate`:
// a band cell "2.41 s..2.70 s" (or "-"), a line saying what the band is or why there is
// none, and the experience line. JSON output merges PredictionJudgement::to_json().
#pragma once

#include <string>

#include "tessel/core/json_fields.hpp"
#include "tessel/profiles/prediction_bounds.hpp"

namespace tessel::cli {

// "2.41 s..2.70 s", or "-" without a band.
std::string band_cell(const profiles::PredictionJudgement& judgement);
// "80% band: 2.41 s..2.70 s (10th-90th percentile of 83 leave-one-out errors)" or
// "no band: profile not calibrated (...)".
std::string band_line(const profiles::PredictionJudgement& judgement);
// The MFU cell with "!" appended when the prediction is outside measured experience.
std::string mfu_cell(const profiles::PredictionJudgement& judgement);
// Copies the judgement's fields into `out` (an estimate's JSON object).
void add_judgement(Json& out, const profiles::PredictionJudgement& judgement);

}  // namespace tessel::cli
