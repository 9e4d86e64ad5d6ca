// A profile is everything tessel believes about one device and the fabrics it was
// measured on: the device's peak figures, kernel samples (what GEMMs, streaming
// kernels and collectives really took) and link samples, each sample with its
// provenance. Profiles live in the SQLite store (ProfileStore) and travel as JSON;
// profiles/data/ ships datasheet ones that measured profiles replace.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/core/device_spec.hpp"
#include "tessel/core/json_fields.hpp"
#include "tessel/profiles/collectives.hpp"

namespace tessel::profiles {

enum class KernelOp { gemm, attention, norm, elementwise, softmax, cross_entropy, optimizer, copy };
enum class SampleSource { measured, datasheet, calibrated };

std::string_view to_string(KernelOp op);
std::string_view to_string(SampleSource source);
std::string_view to_string(CollectiveAlgorithm algorithm);

// Streaming samples (norm, elementwise, softmax, copy) count `elements` of fp32; the
// bytes each element moves, fixed by how the profiler's kernels are written:
// elementwise is the triad c = a + s*b (read 2, write 1), copy reads and writes once,
// norm and softmax read a row twice (statistics, then normalise) and write it once.
double streamed_bytes_per_element(KernelOp op);

struct KernelSample {
  std::string device;
  KernelOp op = KernelOp::gemm;
  std::string precision = "fp32";  // fp32 | tf32 | bf16 | fp16
  std::int64_t m = 0, n = 0, k = 0;       // gemm
  std::int64_t elements = 0;              // streaming ops
  std::int64_t b = 0, h = 0, s = 0, d = 0;  // attention
  double seconds = 0;  // median
  double spread = 0;   // (p90 - p10) / median over the repetitions
  bool flagged = false;  // still noisy after re-measuring
  SampleSource source = SampleSource::measured;
  std::string host, date, tool_version;

  double gemm_flops() const { return 2.0 * double(m) * double(n) * double(k); }
  static KernelSample gemm(std::string device, std::string precision, std::int64_t m, std::int64_t n, std::int64_t k) {
    KernelSample s;
    s.device = std::move(device);
    s.precision = std::move(precision);
    s.m = m, s.n = n, s.k = k;
    return s;
  }
  static KernelSample streaming(std::string device, KernelOp op, std::int64_t elements) {
    KernelSample s;
    s.device = std::move(device);
    s.op = op;
    s.elements = elements;
    return s;
  }
  bool operator==(const KernelSample&) const = default;
};

struct LinkSample {
  std::string fabric;  // "<cluster>/intra" or "<cluster>/inter"
  Collective collective = Collective::all_reduce;
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring;
  int ranks = 2;
  double bytes = 0;    // nccl-tests size
  double seconds = 0;  // median
  double spread = 0;
  bool flagged = false;
  SampleSource source = SampleSource::measured;
  std::string host, date, tool_version;
  bool operator==(const LinkSample&) const = default;
};

struct Profile {
  DeviceSpec device;
  std::vector<KernelSample> kernels;
  std::vector<LinkSample> links;
  Json meta = Json::object();

  // {"format": "tessel-profile", "version": 1, "device", "kernel_samples", "link_samples", "meta"}
  static Profile from_json(const Json& json, const std::string& path = "profile");
  Json to_json() const;
  bool operator==(const Profile&) const = default;
};

KernelSample kernel_sample_from_json(const Json& json, const std::string& device, const std::string& path);
Json to_json(const KernelSample& sample);
LinkSample link_sample_from_json(const Json& json, const std::string& path);
Json to_json(const LinkSample& sample);

// A shipped profile by device name, or a profile JSON file.
Profile shipped_profile(const std::string& device_or_file);

// Where the tool version, host name and date of new samples come from.
std::string tool_version();
std::string host_name();
std::string today_utc();

}  // namespace tessel::profiles
