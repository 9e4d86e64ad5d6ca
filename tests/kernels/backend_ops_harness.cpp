// The op-table harness: tensors in backend memory, seeded inputs, poisoned outputs and
// the comparison (see backend_ops_harness.hpp for why it is built this way).
#include "backend_ops_harness.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "tessel/core/error.hpp"
#include "tessel/kernels/numeric.hpp"

namespace tessel::kernels::ops_test {

namespace {
// A value's bytes stored at `to`, or read from `from`, whatever its alignment there.
template <class T>
void store(unsigned char* to, T value) {
  std::memcpy(to, &value, sizeof value);
}
template <class T>
T load(const unsigned char* from) {
  T value;
  std::memcpy(&value, from, sizeof value);
  return value;
}
}  // namespace

std::vector<unsigned char> encode(const std::vector<double>& values, DType type) {
  std::vector<unsigned char> bytes(values.size() * element_bytes(type));
  for (std::size_t i = 0; i < values.size(); ++i) {
    unsigned char* to = bytes.data() + i * element_bytes(type);
    const double v = values[i];
    switch (type) {
      case DType::f32: store(to, float(v)); break;
      case DType::f64: store(to, v); break;
      case DType::bf16: store(to, numeric::to_bf16(float(v))); break;
      case DType::f16: store(to, numeric::to_f16(float(v))); break;
      case DType::i32: store(to, std::int32_t(v)); break;
      case DType::f8_e4m3: store(to, numeric::to_f8_e4m3(float(v))); break;
    }
  }
  return bytes;
}

std::vector<double> decode(const std::vector<unsigned char>& bytes, DType type) {
  const std::size_t n = bytes.size() / element_bytes(type);
  std::vector<double> values(n);
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char* from = bytes.data() + i * element_bytes(type);
    switch (type) {
      case DType::f32: values[i] = load<float>(from); break;
      case DType::f64: values[i] = load<double>(from); break;
      case DType::bf16: values[i] = numeric::from_bf16(load<std::uint16_t>(from)); break;
      case DType::f16: values[i] = numeric::from_f16(load<std::uint16_t>(from)); break;
      case DType::i32: values[i] = load<std::int32_t>(from); break;
      case DType::f8_e4m3: values[i] = numeric::from_f8_e4m3(*from); break;
    }
  }
  return values;
}

OpRun::OpRun(Backend& backend, DType compute, std::uint32_t seed, bool fp8, bool device_shapes)
    : backend_(backend), compute_(compute), fp8_(fp8), device_shapes_(device_shapes), generator_(seed) {}

OpRun::~OpRun() {
  backend_.synchronize();
  for (void* p : allocations_) backend_.deallocate(p);
}

Ref OpRun::allocate_and_upload(const std::vector<double>& host, DType type) {
  staged_.push_back(encode(host, type));
  const std::vector<unsigned char>& bytes = staged_.back();
  void* device = backend_.allocate(std::max<std::size_t>(bytes.size(), 1));
  allocations_.push_back(device);
  if (!bytes.empty()) backend_.upload(stream(), device, bytes.data(), bytes.size());
  return {device, type};
}

Ref OpRun::random(std::int64_t n, DType type, float low, float high) {
  std::uniform_real_distribution<float> uniform(low, high);
  std::vector<double> host(static_cast<std::size_t>(n));
  for (double& v : host) v = uniform(generator_);
  return allocate_and_upload(host, type);
}

Ref OpRun::values(const std::vector<double>& host, DType type) { return allocate_and_upload(host, type); }

std::int32_t* OpRun::tokens(int n, int low, int high) {
  std::uniform_int_distribution<int> uniform(low, high - 1);
  std::vector<double> host(static_cast<std::size_t>(n));
  for (double& v : host) v = uniform(generator_);
  return static_cast<std::int32_t*>(allocate_and_upload(host, DType::i32).data);
}

Ref OpRun::out(const std::string& label, std::int64_t n, DType type) {
  const Ref r =
      allocate_and_upload(std::vector<double>(std::size_t(n), std::numeric_limits<double>::quiet_NaN()), type);
  collected_.push_back({label, r.data, type, n, 0.0});
  return r;
}

Ref OpRun::inout(const std::string& label, std::int64_t n, DType type, float low, float high) {
  const Ref r = random(n, type, low, high);
  collected_.push_back({label, r.data, type, n, 0.0});
  return r;
}

void OpRun::loosen(const std::string& label, double tolerance) {
  for (Collected& c : collected_)
    if (c.label == label) c.tolerance_floor = std::max(c.tolerance_floor, tolerance);
}

std::vector<Output> OpRun::finish() {
  std::vector<std::vector<unsigned char>> host(collected_.size());
  for (std::size_t i = 0; i < collected_.size(); ++i) {
    host[i].resize(std::size_t(collected_[i].n) * element_bytes(collected_[i].type));
    if (!host[i].empty()) backend_.download(stream(), host[i].data(), collected_[i].data, host[i].size());
  }
  backend_.synchronize();
  staged_.clear();
  std::vector<Output> outputs;
  for (std::size_t i = 0; i < collected_.size(); ++i)
    outputs.push_back({collected_[i].label, decode(host[i], collected_[i].type), collected_[i].tolerance_floor});
  return outputs;
}

double relative_difference(const std::vector<double>& reference, const std::vector<double>& other) {
  constexpr double kInfinite = std::numeric_limits<double>::infinity();
  if (reference.size() != other.size()) return kInfinite;
  double largest = 0.0, difference = 0.0;
  for (std::size_t i = 0; i < reference.size(); ++i) {
    const double r = reference[i], o = other[i];
    if (std::isnan(r) || std::isnan(o)) return kInfinite;
    if (std::isinf(r) || std::isinf(o)) {
      if (r != o) return kInfinite;
      continue;
    }
    largest = std::max(largest, std::abs(r));
    difference = std::max(difference, std::abs(r - o));
  }
  if (difference == 0.0) return 0.0;
  return largest > 0.0 ? difference / largest : kInfinite;
}

}  // namespace tessel::kernels::ops_test
