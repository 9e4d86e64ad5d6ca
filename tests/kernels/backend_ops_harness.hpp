// The harness of the op-table test (backend_ops_test.cpp): one run of one Backend op on one
// backend, inputs drawn from the same seed on every backend and moved through upload and
// download only (so it runs unchanged on a GPU). Pure outputs are poisoned with NaN first,
// so an element the op forgets stays NaN and fails; accumulated (+=) outputs start random.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "tessel/kernels/backend.hpp"

namespace tessel::kernels::ops_test {

// One output tensor of a run, widened to double (fp64 loss sums keep their bits).
// `tolerance_floor`: the least tolerance it is compared with (OpRun::loosen), 0 when the
// op's own applies.
struct Output {
  std::string label;
  std::vector<double> values;
  double tolerance_floor = 0.0;
};

// Tolerance floors of GEMM precision modes against the fp32 CPU reference (Gemm in
// backend.hpp): TF32 keeps 10 mantissa bits of each input, ~1e-3 relative on a product,
// doubled for devices that truncate rather than round the inputs and doubled again for
// the norm-wise measure; fp8 products are exact in fp32, but fp8 tensor cores add partial
// sums at reduced precision between their promotions to fp32.
constexpr double kTf32Tolerance = 4e-3;
constexpr double kF8Tolerance = 1e-3;

class OpRun {
 public:
  // `compute`: the element type activation-like tensors are stored in (f32, bf16, f16).
  // `fp8`: whether fp8 GEMM variants run (both backends compared must agree on it).
  // `device_shapes`: the cases add the shapes a GPU's kernels take other paths on (long
  // sequences, many rows, widths that are and are not a multiple of a 16-byte vector);
  // too slow for the CPU-only columns, so only the GPU check asks for them.
  OpRun(Backend& backend, DType compute, std::uint32_t seed, bool fp8 = true, bool device_shapes = false);
  ~OpRun();
  OpRun(const OpRun&) = delete;
  OpRun& operator=(const OpRun&) = delete;

  Backend& backend() { return backend_; }
  Stream stream() const { return Stream::compute; }
  DType compute() const { return compute_; }
  bool fp8() const { return fp8_; }
  bool device_shapes() const { return device_shapes_; }

  // Inputs: n values uniform in [low, high), stored as `type`.
  Ref random(std::int64_t n, DType type, float low = -1.0f, float high = 1.0f);
  CRef in(std::int64_t n, float low = -1.0f, float high = 1.0f) { return random(n, compute_, low, high); }
  float* in_f32(std::int64_t n, float low = -1.0f, float high = 1.0f) {
    return static_cast<float*>(random(n, DType::f32, low, high).data);
  }
  // Given values (segment-free scalars, hand-picked cases), stored as `type`.
  Ref values(const std::vector<double>& host, DType type);
  // Token ids uniform in [low, high) (device int32).
  std::int32_t* tokens(int n, int low, int high);

  // Outputs the op writes: poisoned with NaN, collected by finish().
  Ref out(const std::string& label, std::int64_t n, DType type);
  Ref out(const std::string& label, std::int64_t n) { return out(label, n, compute_); }
  float* out_f32(const std::string& label, std::int64_t n) {
    return static_cast<float*>(out(label, n, DType::f32).data);
  }
  // Outputs the op reads and updates (+=, in place): random start, collected by finish().
  Ref inout(const std::string& label, std::int64_t n, DType type, float low = -1.0f, float high = 1.0f);
  Ref inout(const std::string& label, std::int64_t n) { return inout(label, n, compute_); }
  float* inout_f32(const std::string& label, std::int64_t n, float low = -1.0f, float high = 1.0f) {
    return static_cast<float*>(inout(label, n, DType::f32, low, high).data);
  }

  // Compares the output `label` with at least `tolerance` (a precision mode's own bound).
  void loosen(const std::string& label, double tolerance);

  // Waits for the backend and returns the collected outputs in the order they were made.
  std::vector<Output> finish();

 private:
  struct Collected {
    std::string label;
    const void* data;
    DType type;
    std::int64_t n;
    double tolerance_floor;
  };
  Ref allocate_and_upload(const std::vector<double>& host, DType type);

  Backend& backend_;
  DType compute_;
  bool fp8_;
  bool device_shapes_;
  std::mt19937 generator_;
  std::vector<void*> allocations_;
  std::deque<std::vector<unsigned char>> staged_;  // host copies alive until the stream passes them
  std::vector<Collected> collected_;
};

// Bytes of `values` stored as `type` (floating types round to nearest even; i32 truncates).
std::vector<unsigned char> encode(const std::vector<double>& values, DType type);
std::vector<double> decode(const std::vector<unsigned char>& bytes, DType type);

// How far `other` is from `reference`, over one output: the largest absolute difference
// over the largest absolute reference value (a norm-wise relative error, so outputs that
// pass through zero do not blow up). Infinite values must match exactly, and a NaN in
// either (a poisoned element left unwritten) counts as an infinite error.
double relative_difference(const std::vector<double>& reference, const std::vector<double>& other);

}  // namespace tessel::kernels::ops_test
