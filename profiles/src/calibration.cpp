// Calibration parameters: their ranges, JSON form and the profile line printed with every
// prediction. The ranges bound what a fit may claim (a GEMM scale of 0.5..1.5 keeps a curve
// within half of the datasheet's either way); a profile outside them is refused by name. A
// parameter with a physical limit on GPUs carries it (gpu_upper) with its source beside it.
#include "tessel/profiles/calibration.hpp"

#include <fmt/format.h>

#include <cmath>

#include "tessel/core/error.hpp"
#include "tessel/profiles/profile.hpp"

namespace tessel::profiles {

const std::array<Calibration::Parameter, Calibration::kParameterCount>& Calibration::parameters() {
  // NCCL's largest default per-call base latency (src/graph/tuning.cc,
  // ncclTunerConstantsDefaults.baseLatencies: 14.0 us for LL128; Simple 8.4 us) plus the
  // host's launch of the call (5-20 us: HolisticTraceAnalysis docs, "CUDA kernel launch
  // stats"): a GPU collective call's fixed cost beyond its alpha-beta time is at most
  // 14 + 20 = 34 us.
  static constexpr double kGpuCallOverheadBound_s = 34e-6;
  static constexpr std::string_view kGpuCallOverheadSource =
      "NCCL src/graph/tuning.cc default base latency, at most 14.0 us per call (LL128), plus a host launch of "
      "5-20 us (HolisticTraceAnalysis docs, CUDA kernel launch stats): 34 us";
  // tp_comm_overlap's defaults are the datasheet's view, from the SM shares Transformer
  // Engine's userbuffers reserve (docs/CALIBRATION.md); bounds: an overlap hides at most
  // all (1) and costs a GEMM at most half again (0.5, four times the SM share reserved).
  static const std::array<Parameter, kParameterCount> table{{
      {"gemm_efficiency_scale", 0.5, 1.5, &Calibration::gemm_efficiency_scale, 1.5, ""},
      {"memory_efficiency_scale", 0.1, 2.0, &Calibration::memory_efficiency_scale, 2.0, ""},
      {"attention_efficiency_scale", 0.1, 2.0, &Calibration::attention_efficiency_scale, 2.0, ""},
      {"intra_bus_efficiency", 0.1, 2.0, &Calibration::intra_bus_efficiency, 2.0, ""},
      {"inter_bus_efficiency", 0.1, 2.0, &Calibration::inter_bus_efficiency, 2.0, ""},
      {"overlap_efficiency", 0.0, 1.0, &Calibration::overlap_efficiency, 1.0, ""},
      {"layer_overhead_s", 0.0, 0.01, &Calibration::layer_overhead_s, 0.01, ""},
      {"collective_call_overhead_s", 0.0, 0.1, &Calibration::collective_call_overhead_s, kGpuCallOverheadBound_s,
       kGpuCallOverheadSource},
      {"collective_contention", 0.0, 1.0, &Calibration::collective_contention, 1.0, ""},
      {"tp_overlap_efficiency", 0.0, 1.0, &Calibration::tp_overlap_efficiency, 1.0, ""},
      {"tp_overlap_gemm_slowdown", 0.0, 0.5, &Calibration::tp_overlap_gemm_slowdown, 0.5, ""},
      // A framework or a kernel kind may run up to four times faster or slower than the
      // other (eager PyTorch's elementwise kernels against Megatron's fused ones; batched
      // score GEMMs and a softmax against one flash-style kernel).
      {"megatron_memory_factor", 0.25, 4.0, &Calibration::megatron_memory_factor, 4.0, ""},
      {"unfused_attention_factor", 0.25, 4.0, &Calibration::unfused_attention_factor, 4.0, ""},
      {"compiled_memory_factor", 0.25, 4.0, &Calibration::compiled_memory_factor, 4.0, ""},
  }};
  return table;
}

std::string Calibration::parameter_names() {
  std::string out;
  for (const Parameter& parameter : parameters()) out += (out.empty() ? "" : ", ") + std::string(parameter.name);
  return out;
}

Calibration Calibration::for_plan(Framework framework, Kernels kernels) const {
  Calibration out = *this;
  if (framework == Framework::megatron) out.memory_efficiency_scale *= megatron_memory_factor;
  if (framework == Framework::torch_compile) out.memory_efficiency_scale *= compiled_memory_factor;
  if (kernels == Kernels::unfused) out.attention_efficiency_scale *= unfused_attention_factor;
  out.megatron_memory_factor = 1.0;
  out.unfused_attention_factor = 1.0;
  out.compiled_memory_factor = 1.0;
  return out;
}

Calibration Calibration::from_json(const Json& json, const std::string& path) {
  if (!json.is_object()) throw Error(fmt::format("{}: must be an object of calibration parameters", path));
  Calibration out;
  for (const auto& [key, value] : json.items()) {
    const Parameter* found = nullptr;
    for (const Parameter& parameter : parameters()) {
      if (parameter.name == key) found = &parameter;
    }
    if (!found) {
      throw Error(fmt::format("{}.{}: unknown calibration parameter (allowed: {})", path, key, parameter_names()));
    }
    const double number = value.is_number() ? value.get<double>() : std::nan("");
    if (!(number >= found->lower && number <= found->upper)) {
      throw Error(fmt::format("{}.{}: must be a number in [{}, {}], got {}", path, key, found->lower, found->upper,
                              value.dump()));
    }
    out.*(found->field) = number;
  }
  return out;
}

Json Calibration::to_json() const {
  Json out = Json::object();
  for (const Parameter& parameter : parameters()) out[std::string(parameter.name)] = this->*(parameter.field);
  return out;
}

Calibration calibration_of(const Profile& profile) {
  if (!profile.meta.is_object() || !profile.meta.contains("calibration")) return {};
  const Json& calibration = profile.meta["calibration"];
  const std::string path = fmt::format("profile {} meta.calibration", profile.device.name);
  if (!calibration.is_object() || !calibration.contains("parameters")) {
    throw Error(fmt::format("{}: must be an object with \"parameters\"", path));
  }
  return Calibration::from_json(calibration["parameters"], path + ".parameters");
}

bool is_calibrated(const Profile& profile) {
  return profile.meta.is_object() && profile.meta.value("source", std::string()) == "calibrated" &&
         profile.meta.contains("calibration");
}

std::string describe_profile(const Profile& profile) {
  const std::string source =
      profile.meta.is_object() ? profile.meta.value("source", std::string("measured")) : std::string("measured");
  if (is_calibrated(profile)) {
    const Json& calibration = profile.meta["calibration"];
    const Json runs = calibration.value("fitted_on", Json::array());
    const std::string corpus = calibration.value("inputs", std::string("published"));
    return fmt::format("profile: {} calibrated on {} {} runs", profile.device.name, runs.size(), corpus);
  }
  return fmt::format("profile: {} ({})", profile.device.name, source);
}

}  // namespace tessel::profiles
