// One plan's step three ways, for the tests that set a calibrated simulator against the
// planner: analytic at the datasheet profile and at a calibrated one, and simulated at
// the calibrated one on contention-free links, with stream overlap on or off in both
// models. SimGrid allows one engine per process: a TEST calls steps_of once.
#pragma once

#include <string>

#include <fmt/format.h>

#include "tessel/planner/cost_model.hpp"
#include "tessel/profiles/profile.hpp"
#include "tessel/simulator/simulation.hpp"

namespace tessel::simulator_test {

struct Steps {
  double analytic_plain_s = 0, analytic_s = 0, simulated_s = 0;
};

// The device's datasheet profile with `parameters` as its calibration (none when empty).
inline profiles::Profile with_calibration(const std::string& device, const Json& parameters) {
  profiles::Profile profile = profiles::shipped_profile(device);
  if (!parameters.empty()) profile.meta["calibration"] = Json{{"parameters", parameters}};
  return profile;
}

inline Steps steps_of(const Plan& plan, const profiles::Profile& calibrated, bool overlap) {
  auto analytic = [&](const profiles::Profile& profile) {
    planner::CostModel model(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(), profile);
    model.set_overlap(overlap);
    return model.estimate(plan.parallel).step_time_s;
  };
  simulator::SimulationOptions options;
  options.overlap = overlap;
  options.contention_free = true;
  return {analytic(profiles::shipped_profile(plan.cluster.device)), analytic(calibrated),
          simulator::simulate(Program::lower(plan), calibrated, options).step_time_s};
}

// "dp16 ...: simulated 1.2 s, analytic 1.3 s (datasheet 1.1 s)", for failure messages.
inline std::string describe(const Plan& plan, const Steps& steps) {
  return fmt::format("{}: simulated {} s, analytic {} s (datasheet {} s)", plan.parallel.summary(), steps.simulated_s,
                     steps.analytic_s, steps.analytic_plain_s);
}

}  // namespace tessel::simulator_test
