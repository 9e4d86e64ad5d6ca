// The compare tab's numbers without a display: op kinds summed into op classes, before
// and after calibration, measured beside them; "not calibrated" carried as no calibrated
// number rather than a copy; and the profile a "before" is simulated on.
#include "tessel/gui/run_comparison.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "tessel/profiles/calibration.hpp"

using tessel::Json;
using tessel::gui::OpClassComparison;
using tessel::gui::OpKindColour;

namespace {
// One measured step on one rank: 4 ms of GEMM, 2 of attention, 1 memory-bound, 3 of the
// data-parallel all-reduce.
std::vector<tessel::profiles::EventRecord> measured_step() {
  return {{1, 0, "compute", "mb0/L0/fwd/mlp.fc1", 0.000, 0.004},
          {1, 0, "compute", "mb0/L0/fwd/attn.core", 0.004, 0.006},
          {1, 0, "compute", "mb0/L0/fwd/mlp.norm", 0.006, 0.007},
          {1, 0, "dp_comm", "L0/dp/grad.all_reduce", 0.007, 0.010}};
}

// The same ops as `tessel simulate --trace` writes them, with these durations (ms).
Json trace(double fc1_ms, double attention_ms, double norm_ms, double all_reduce_ms) {
  Json events = Json::array();
  double at_us = 0;
  auto add = [&](const char* id, int stream, double ms) {
    events.push_back({{"ph", "X"}, {"name", id}, {"pid", 0}, {"tid", stream}, {"ts", at_us}, {"dur", ms * 1e3}});
    at_us += ms * 1e3;
  };
  add("mb0/L0/fwd/mlp.fc1", 0, fc1_ms);
  add("mb0/L0/fwd/attn.core", 0, attention_ms);
  add("mb0/L0/fwd/mlp.norm", 0, norm_ms);
  add("L0/dp/grad.all_reduce", 2, all_reduce_ms);
  return {{"traceEvents", events}};
}

void expect_class(const OpClassComparison& c, OpKindColour op_class, double uncalibrated_ms,
                  std::optional<double> calibrated_ms, double measured_ms) {
  EXPECT_EQ(c.op_class, op_class) << tessel::gui::op_class_name(op_class);
  EXPECT_NEAR(c.uncalibrated_s * 1e3, uncalibrated_ms, 1e-9) << tessel::gui::op_class_name(op_class);
  ASSERT_EQ(c.calibrated_s.has_value(), calibrated_ms.has_value()) << tessel::gui::op_class_name(op_class);
  if (calibrated_ms) {
    EXPECT_NEAR(*c.calibrated_s * 1e3, *calibrated_ms, 1e-9) << tessel::gui::op_class_name(op_class);
  }
  EXPECT_NEAR(c.measured_s * 1e3, measured_ms, 1e-9) << tessel::gui::op_class_name(op_class);
}
}  // namespace

TEST(RunComparison, OpClassesCarryThePredictionBeforeAndAfterCalibrationAndTheMeasurement) {
  const Json calibrated = trace(3, 1.5, 0.8, 2), uncalibrated = trace(1, 0.5, 0.2, 1);
  const tessel::gui::RunComparison c = tessel::gui::compare_run(measured_step(), calibrated, &uncalibrated);
  ASSERT_EQ(c.classes.size(), 4u);  // no tensor-parallel, pipeline or copy time on either side
  expect_class(c.classes[0], OpKindColour::gemm, 1, 3, 4);
  expect_class(c.classes[1], OpKindColour::attention, 0.5, 1.5, 2);
  expect_class(c.classes[2], OpKindColour::memory, 0.2, 0.8, 1);
  expect_class(c.classes[3], OpKindColour::data_comm, 1, 2, 3);
  // The op kinds (table, parity) are the calibrated prediction's.
  ASSERT_EQ(c.kinds.size(), 4u);
  const auto fc1 = std::find_if(c.kinds.begin(), c.kinds.end(),
                                [](const tessel::OpKindComparison& k) { return k.kind == "fwd mlp.fc1"; });
  ASSERT_NE(fc1, c.kinds.end());
  EXPECT_NEAR(fc1->predicted_s, 0.003, 1e-12);
  // The timeline: the measured rows, each with its predicted ghost beneath.
  ASSERT_EQ(c.rows.size(), 4u);
  EXPECT_FALSE(c.rows[0].ghost);
  EXPECT_TRUE(c.rows[1].ghost);
  EXPECT_EQ(c.rows[1].stream, c.rows[0].stream);
}

TEST(RunComparison, WithoutACalibratedProfileThereIsNoCalibratedNumber) {
  const tessel::gui::RunComparison c = tessel::gui::compare_run(measured_step(), trace(1, 0.5, 0.2, 1));
  ASSERT_EQ(c.classes.size(), 4u);
  expect_class(c.classes[0], OpKindColour::gemm, 1, std::nullopt, 4);
  expect_class(c.classes[3], OpKindColour::data_comm, 1, std::nullopt, 3);
  EXPECT_STREQ(tessel::gui::op_class_name(OpKindColour::tensor_comm), "TP collectives");
}

TEST(RunComparison, TheBeforeProfileIsTheCalibratedOneWithItsCalibrationAtTheDefaults) {
  tessel::profiles::Profile profile = tessel::profiles::shipped_profile("H100-SXM");
  const std::size_t kernels = profile.kernels.size();
  profile.meta["source"] = "calibrated";
  profile.meta["calibrated_from"] = "datasheet";
  profile.meta["calibration"] = {{"parameters", {{"gemm_efficiency_scale", 0.8}, {"layer_overhead_s", 0.001}}}};
  ASSERT_TRUE(tessel::profiles::is_calibrated(profile));
  ASSERT_FALSE(tessel::profiles::calibration_of(profile).is_default());
  const tessel::profiles::Profile before = tessel::gui::without_calibration(profile);
  EXPECT_FALSE(tessel::profiles::is_calibrated(before));
  EXPECT_TRUE(tessel::profiles::calibration_of(before).is_default());
  EXPECT_EQ(before.meta.value("source", ""), "datasheet");
  EXPECT_FALSE(before.meta.contains("calibrated_from"));
  EXPECT_EQ(before.kernels.size(), kernels);  // the measurements stay
  EXPECT_EQ(before.device.name, profile.device.name);
}
