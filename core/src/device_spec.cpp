#include "tessel/core/device_spec.hpp"

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/core/presets.hpp"

namespace tessel {

double DeviceSpec::peak_flops_per_s(Precision precision) const {
  switch (precision) {
    case Precision::fp32: return peak_fp32_flops_per_s;
    case Precision::bf16: return peak_bf16_flops_per_s;
    case Precision::fp16: return peak_fp16_flops_per_s;
    case Precision::fp8: return peak_fp8_flops_per_s;
  }
  return peak_fp32_flops_per_s;
}

bool build_links_cuda_libraries() {
#ifdef TESSEL_LINKS_CUDA
  return true;
#else
  return false;
#endif
}

double DeviceSpec::runtime_bytes() const {
  return workspace_bytes + (build_links_cuda_libraries() ? cuda_libraries_bytes : 0.0);
}

void DeviceSpec::check_precision(Precision precision) const {
  if (precision == Precision::fp8 && !has_fp8()) {
    throw Error(fmt::format("train.precision: fp8 needs fp8 tensor cores, and device {} has none (its profile gives no "
                            "fp8 peak; H100-SXM and H200 have them); use bf16",
                            name));
  }
}

DeviceSpec DeviceSpec::from_json(const Json& json, const std::string& path) {
  JsonFields f(json, path);
  DeviceSpec d;
  d.name = f.string("name");
  d.kind = f.choice("kind", {"gpu", "cpu"});
  {
    const Json* peaks = f.get("peak_flops_per_s");
    if (peaks == nullptr) f.fail("peak_flops_per_s", "missing (required)");
    JsonFields p(*peaks, f.field_path("peak_flops_per_s"));
    d.peak_fp32_flops_per_s = p.number_in_range("fp32", 1, limits::kMaxFlopsPerS);
    d.peak_tf32_flops_per_s = p.number_in_range_or("tf32", 1, limits::kMaxFlopsPerS, d.peak_fp32_flops_per_s);
    d.peak_bf16_flops_per_s = p.number_in_range("bf16", 1, limits::kMaxFlopsPerS);
    d.peak_fp16_flops_per_s = p.number_in_range_or("fp16", 1, limits::kMaxFlopsPerS, d.peak_bf16_flops_per_s);
    if (p.has("fp8")) d.peak_fp8_flops_per_s = p.number_in_range("fp8", 1, limits::kMaxFlopsPerS);
    p.finish();
  }
  d.memory_bytes = f.number_in_range("memory_bytes", 1, limits::kMaxDeviceBytes);
  d.memory_bandwidth_bytes_per_s = f.number_in_range("memory_bandwidth_bytes_per_s", 1, limits::kMaxBytesPerS);
  d.memory_efficiency = f.fraction_or("memory_efficiency", 1.0);
  d.workspace_bytes = f.has("workspace_bytes") ? f.positive_number("workspace_bytes") : 0.0;
  d.cuda_libraries_bytes = f.has("cuda_libraries_bytes") ? f.positive_number("cuda_libraries_bytes") : 0.0;
  if (d.cuda_libraries_bytes > 0 && d.kind != "cpu") {
    f.fail("cuda_libraries_bytes", "is stated for CPU devices only (a GPU's workspace_bytes holds its CUDA runtime)");
  }
  d.moe_load_imbalance = f.number_in_range_or("moe_load_imbalance", 1.0, 1024.0, 1.0);
  d.cores = f.has("cores") ? int(f.positive_int_or("cores", 1, limits::kMaxGpus)) : 0;
  if (d.cores > 0 && d.kind != "cpu") f.fail("cores", "is stated for CPU devices only (kind \"cpu\")");
  if (const Json* sources = f.get("sources")) d.sources = *sources;
  f.finish();
  return d;
}

Json DeviceSpec::to_json() const {
  Json out{{"name", name},
           {"kind", kind},
           {"peak_flops_per_s",
            {{"fp32", peak_fp32_flops_per_s},
             {"tf32", peak_tf32_flops_per_s},
             {"bf16", peak_bf16_flops_per_s},
             {"fp16", peak_fp16_flops_per_s}}},
           {"memory_bytes", memory_bytes},
           {"memory_bandwidth_bytes_per_s", memory_bandwidth_bytes_per_s},
           {"memory_efficiency", memory_efficiency},
           {"workspace_bytes", workspace_bytes}};
  if (has_fp8()) out["peak_flops_per_s"]["fp8"] = peak_fp8_flops_per_s;
  if (moe_load_imbalance != 1.0) out["moe_load_imbalance"] = moe_load_imbalance;
  if (cores > 0) out["cores"] = cores;
  if (cuda_libraries_bytes > 0) out["cuda_libraries_bytes"] = cuda_libraries_bytes;
  if (!sources.is_null()) out["sources"] = sources;
  return out;
}

DeviceSpec resolve_device(const std::string& preset_or_file) {
  const Json profile = load_preset_or_file("profiles", preset_or_file, "cluster.device");
  if (!profile.is_object() || !profile.contains("device")) {
    throw Error(fmt::format("cluster.device: '{}' is not a tessel profile (no \"device\" object)", preset_or_file));
  }
  return DeviceSpec::from_json(profile["device"], fmt::format("device ({})", preset_or_file));
}

}  // namespace tessel
