// The one call every command and the GUI make to put an error band and the measured-experience
// flag on a prediction: the profile supplies the bounds (profiles/prediction_bounds.hpp), the
// model its parameter count. A simulated step takes the simulator's own band when the profile
// has one, else the analytic band, and band_source says which (docs/CALIBRATION.md).
#pragma once

#include "tessel/planner/cost_model.hpp"
#include "tessel/planner/estimate.hpp"
#include "tessel/profiles/prediction_bounds.hpp"

namespace tessel::planner {

inline profiles::PredictionJudgement judge_prediction(const CostModel& model, double step_time_s, double mfu) {
  return profiles::judge_prediction(model.costs().prediction_bounds(), step_time_s, mfu,
                                    double(model.model().parameter_count()));
}

inline profiles::PredictionJudgement judge_simulated_prediction(const CostModel& model, double step_time_s,
                                                               double mfu) {
  return profiles::judge_prediction(profiles::for_simulated_steps(model.costs().prediction_bounds()), step_time_s, mfu,
                                    double(model.model().parameter_count()));
}

inline profiles::PredictionJudgement judge_prediction(const CostModel& model, const Estimate& estimate) {
  return judge_prediction(model, estimate.step_time_s, estimate.mfu);
}

}  // namespace tessel::planner
