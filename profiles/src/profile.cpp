#include "tessel/profiles/profile.hpp"

#include <unistd.h>

#include <array>
#include <chrono>
#include <ctime>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/core/presets.hpp"

namespace tessel::profiles {

namespace {
template <typename Enum, std::size_t N>
Enum parse_name(const std::array<std::string_view, N>& names, const Json& value, const std::string& path) {
  if (value.is_string()) {
    for (std::size_t i = 0; i < N; ++i) {
      if (names[i] == value.get<std::string>()) return Enum(i);
    }
  }
  std::string allowed;
  for (auto name : names) {
    if (!allowed.empty()) allowed += '|';
    allowed += name;
  }
  throw Error(fmt::format("{}: must be one of {}, got {}", path, allowed, value.dump()));
}

constexpr std::array<std::string_view, 8> kOpNames{"gemm",    "attention",     "norm",      "elementwise",
                                                   "softmax", "cross_entropy", "optimizer", "copy"};
constexpr std::array<std::string_view, 3> kSourceNames{"measured", "datasheet", "calibrated"};
constexpr std::array<std::string_view, 7> kCollectiveNames{"all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                                           "reduce",     "send_recv",  "all_to_all"};
constexpr std::array<std::string_view, 2> kAlgorithmNames{"ring", "tree"};
}  // namespace

std::string_view to_string(KernelOp op) { return kOpNames[std::size_t(op)]; }
std::string_view to_string(SampleSource source) { return kSourceNames[std::size_t(source)]; }
std::string_view to_string(CollectiveAlgorithm algorithm) { return kAlgorithmNames[std::size_t(algorithm)]; }

double streamed_bytes_per_element(KernelOp op) {
  switch (op) {
    case KernelOp::elementwise: return 12.0;
    case KernelOp::copy: return 8.0;
    case KernelOp::norm:
    case KernelOp::softmax:
    case KernelOp::cross_entropy: return 12.0;
    default: return 0.0;
  }
}

namespace {

// Kernel and link samples carry the same provenance (how noisy, whether extrapolated,
// where and when measured); one reader and one writer keep the two formats in step.
template <typename Sample>
void read_provenance(JsonFields& f, Sample& s) {
  s.spread = f.number_in_range_or("spread", 0, limits::kMaxSampleSpread, 0);
  s.flagged = f.boolean_or("flagged", false);
  if (const Json* source = f.get("source")) s.source = parse_name<SampleSource>(kSourceNames, *source, f.field_path("source"));
  s.host = f.string_or("host", "");
  s.date = f.string_or("date", "");
  s.tool_version = f.string_or("tool_version", "");
}

template <typename Sample>
void write_provenance(const Sample& s, Json& out) {
  if (s.spread != 0) out["spread"] = s.spread;
  if (s.flagged) out["flagged"] = true;
  if (!s.host.empty()) out["host"] = s.host;
  if (!s.date.empty()) out["date"] = s.date;
  if (!s.tool_version.empty()) out["tool_version"] = s.tool_version;
}

}  // namespace

KernelSample kernel_sample_from_json(const Json& json, const std::string& device, const std::string& path) {
  JsonFields f(json, path);
  KernelSample s;
  s.device = device;
  const Json* op = f.get("op");
  if (op == nullptr) f.fail("op", "missing (required)");
  s.op = parse_name<KernelOp>(kOpNames, *op, f.field_path("op"));
  s.precision = f.choice_or("precision", {"fp32", "tf32", "bf16", "fp16", "fp8"}, "fp32");
  s.m = f.positive_int_or("m", 0);
  s.n = f.positive_int_or("n", 0);
  s.k = f.positive_int_or("k", 0);
  s.elements = f.positive_int_or("elements", 0, limits::kMaxKernelElements);
  s.b = f.positive_int_or("b", 0);
  s.h = f.positive_int_or("h", 0);
  s.s = f.positive_int_or("s", 0);
  s.d = f.positive_int_or("d", 0);
  s.seconds = f.number_in_range("seconds", limits::kMinMeasuredSeconds, limits::kMaxMeasuredSeconds);
  read_provenance(f, s);
  f.finish();
  if (s.op == KernelOp::gemm && (s.m == 0 || s.n == 0 || s.k == 0)) f.fail("m", "a gemm sample needs m, n and k");
  if (streamed_bytes_per_element(s.op) > 0 && s.elements == 0) f.fail("elements", "a streaming sample needs elements");
  return s;
}

Json to_json(const KernelSample& s) {
  Json out{{"op", to_string(s.op)}, {"precision", s.precision}, {"seconds", s.seconds}, {"source", to_string(s.source)}};
  auto put = [&](const char* key, std::int64_t value) {
    if (value != 0) out[key] = value;
  };
  put("m", s.m), put("n", s.n), put("k", s.k), put("elements", s.elements);
  put("b", s.b), put("h", s.h), put("s", s.s), put("d", s.d);
  write_provenance(s, out);
  return out;
}

LinkSample link_sample_from_json(const Json& json, const std::string& path) {
  JsonFields f(json, path);
  LinkSample s;
  s.fabric = f.string("fabric");
  const Json* op = f.get("collective");
  if (op == nullptr) f.fail("collective", "missing (required)");
  s.collective = parse_name<Collective>(kCollectiveNames, *op, f.field_path("collective"));
  if (const Json* algorithm = f.get("algorithm")) {
    s.algorithm = parse_name<CollectiveAlgorithm>(kAlgorithmNames, *algorithm, f.field_path("algorithm"));
  }
  s.ranks = int(f.positive_int("ranks", limits::kMaxGpus));
  s.bytes = f.number_in_range("bytes", 1, limits::kMaxMeasuredBytes);
  s.seconds = f.number_in_range("seconds", limits::kMinMeasuredSeconds, limits::kMaxMeasuredSeconds);
  read_provenance(f, s);
  f.finish();
  return s;
}

Json to_json(const LinkSample& s) {
  Json out{{"fabric", s.fabric},   {"collective", to_string(s.collective)}, {"algorithm", to_string(s.algorithm)},
           {"ranks", s.ranks},     {"bytes", s.bytes},                      {"seconds", s.seconds},
           {"source", to_string(s.source)}};
  write_provenance(s, out);
  return out;
}

Profile Profile::from_json(const Json& json, const std::string& path) {
  JsonFields f(json, path);
  if (f.string("format") != "tessel-profile") f.fail("format", "must be \"tessel-profile\"");
  f.int_in_range("version", 1, 1, 1);
  Profile p;
  const Json* device = f.get("device");
  if (device == nullptr) f.fail("device", "missing (required)");
  p.device = DeviceSpec::from_json(*device, f.field_path("device"));
  if (const Json* kernels = f.get("kernel_samples")) {
    if (!kernels->is_array()) f.fail("kernel_samples", "must be an array");
    for (std::size_t i = 0; i < kernels->size(); ++i) {
      p.kernels.push_back(kernel_sample_from_json((*kernels)[i], p.device.name,
                                                  fmt::format("{}[{}]", f.field_path("kernel_samples"), i)));
    }
  }
  if (const Json* links = f.get("link_samples")) {
    if (!links->is_array()) f.fail("link_samples", "must be an array");
    for (std::size_t i = 0; i < links->size(); ++i) {
      p.links.push_back(link_sample_from_json((*links)[i], fmt::format("{}[{}]", f.field_path("link_samples"), i)));
    }
  }
  if (const Json* meta = f.get("meta")) p.meta = *meta;
  f.finish();
  return p;
}

Json Profile::to_json() const {
  Json kernels = Json::array();
  for (const auto& sample : this->kernels) kernels.push_back(profiles::to_json(sample));
  Json link_array = Json::array();
  for (const auto& sample : links) link_array.push_back(profiles::to_json(sample));
  return Json{{"format", "tessel-profile"}, {"version", 1},         {"device", device.to_json()},
              {"kernel_samples", kernels},   {"link_samples", link_array}, {"meta", meta}};
}

Profile shipped_profile(const std::string& device_or_file) {
  const Json json = load_preset_or_file("profiles", device_or_file, "profile");
  return Profile::from_json(json, fmt::format("profile ({})", device_or_file));
}

std::string tool_version() { return "tessel 0.1.0"; }

std::string host_name() {
  char buffer[256] = {};
  if (gethostname(buffer, sizeof(buffer) - 1) != 0) return "unknown";
  return buffer;
}

std::string today_utc() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%d", &utc);
  return buffer;
}

}  // namespace tessel::profiles
