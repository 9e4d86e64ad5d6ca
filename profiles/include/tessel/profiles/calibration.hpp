// Calibration: the few corrections `tessel calibrate` fits to measured runs, held as a quantity
// of the profile (meta "calibration") so planner and simulator read them through one
// CostLookup and hold no correction constant of their own. Every default leaves predictions
// bit for bit as without it (scales of 1, overheads of 0), except the tensor-parallel overlap
// pair; docs/CALIBRATION.md says what each parameter acts on and why it exists.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "tessel/core/enums.hpp"
#include "tessel/core/json_fields.hpp"

namespace tessel::profiles {

struct Profile;

struct Calibration {
  double gemm_efficiency_scale = 1.0;
  double memory_efficiency_scale = 1.0;
  double attention_efficiency_scale = 1.0;
  double intra_bus_efficiency = 1.0;
  double inter_bus_efficiency = 1.0;
  double overlap_efficiency = 1.0;
  double layer_overhead_s = 0.0;
  double collective_call_overhead_s = 0.0;
  double collective_contention = 0.0;
  double tp_overlap_efficiency = 1.0;
  double tp_overlap_gemm_slowdown = 0.09;
  double megatron_memory_factor = 1.0;
  double unfused_attention_factor = 1.0;
  double compiled_memory_factor = 1.0;

  // One fitted parameter: its name in JSON, the range a fit may search, and where it lives.
  // gpu_upper bounds it on GPU devices, where a physical limit is known and cited in
  // gpu_upper_source (the same as upper where none is needed).
  struct Parameter {
    std::string_view name;
    double lower, upper;
    double Calibration::*field;
    double gpu_upper;
    std::string_view gpu_upper_source;
    // The largest value a fit may give it on a device of this kind ("gpu", "cpu").
    double upper_for(std::string_view device_kind) const { return device_kind == "gpu" ? gpu_upper : upper; }
  };
  static constexpr std::size_t kParameterCount = 14;
  static const std::array<Parameter, kParameterCount>& parameters();
  // "gemm_efficiency_scale, memory_efficiency_scale, ...": every name, for error messages.
  static std::string parameter_names();
  // The calibration a plan of this framework and these kernels is priced with: the memory
  // scale times megatron_memory_factor for megatron (compiled_memory_factor for
  // torch.compile), the attention scale times
  // unfused_attention_factor for unfused kernels; the factors themselves back at 1.
  Calibration for_plan(Framework framework, Kernels kernels) const;

  bool is_default() const { return *this == Calibration{}; }
  // {"gemm_efficiency_scale": ..., ...}; every key optional, each within its range.
  static Calibration from_json(const Json& json, const std::string& path);
  Json to_json() const;
  bool operator==(const Calibration&) const = default;
};

// The profile's calibration (meta "calibration" -> "parameters"), or the defaults.
Calibration calibration_of(const Profile& profile);

// Whether the profile was written by calibration (meta source "calibrated").
bool is_calibrated(const Profile& profile);

// One line saying which profile a prediction uses, e.g. "profile: H100-SXM calibrated on
// 83 published runs" or "profile: H100-SXM (datasheet)".
std::string describe_profile(const Profile& profile);

}  // namespace tessel::profiles
