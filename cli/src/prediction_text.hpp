// How the CLI prints a prediction's error band and its measured-experience flag
// (profiles/prediction_bounds.hpp), the same way in `plan`, `estimate` and `simulate`:
// a band cell "2.41 s..2.70 s" (or "-"), a line saying what the band is or why there is
// none, and the experience line. JSON output merges PredictionJudgement::to_json().
#pragma once

#include <string>
#include <vector>

#include "tessel/core/json_fields.hpp"
#include "tessel/planner/cost_model.hpp"
#include "tessel/planner/estimate.hpp"
#include "tessel/planner/prediction_judgement.hpp"
#include "tessel/profiles/prediction_bounds.hpp"

namespace tessel::cli {

// "2.41 s..2.70 s", or "-" without a band.
std::string band_cell(const profiles::PredictionJudgement& judgement);
// "80% band: 2.41 s..2.70 s (10th-90th percentile of 83 leave-one-out errors)" ("83
// simulated leave-one-out errors" when the band is the simulator's) or
// "no band: profile not calibrated (...)".
std::string band_line(const profiles::PredictionJudgement& judgement);
// The MFU cell with "!" appended when the prediction is outside measured experience.
std::string mfu_cell(const profiles::PredictionJudgement& judgement);
// Copies the judgement's fields into `out` (an estimate's JSON object).
void add_judgement(Json& out, const profiles::PredictionJudgement& judgement);

// Under `tessel plan`'s table: what the band is (or why there is none), the best plan's
// standing against measured experience, and how many plans shown are flagged.
std::string plans_judgement_text(const std::vector<planner::Estimate>& plans, const planner::CostModel& model);
// `tessel plan --json`: each plan's judgement, and the band of its simulated step time
// (--refine) as "simulated_step_time_band_s" with "simulated_step_time_s": the
// simulator's own band when the profile has one, else the analytic band.
void add_plans_judgement(Json& plans_json, const std::vector<planner::Estimate>& plans, const planner::CostModel& model,
                         const std::vector<double>& simulated);

}  // namespace tessel::cli
