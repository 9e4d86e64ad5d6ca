// Element types of the tensors a backend computes on, and typed views of backend memory.
// Compute happens in fp32 inside every op; the element type says how a tensor is stored:
// fp32, or bf16 / fp16 (the upper or IEEE half of the bits). fp8 (e4m3, numeric.hpp)
// is accepted as GEMM inputs and by the CPU backend's convert; other ops take none. i32
// holds tokens, f64 the scalars (loss and norm sums) that collectives reduce.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tessel::kernels {

enum class DType : std::uint8_t { f32, bf16, f16, f8_e4m3, i32, f64 };

constexpr std::size_t element_bytes(DType type) {
  switch (type) {
    case DType::f64: return 8;
    case DType::f32:
    case DType::i32: return 4;
    case DType::bf16:
    case DType::f16: return 2;
    case DType::f8_e4m3: return 1;
  }
  return 0;
}

constexpr std::string_view to_string(DType type) {
  switch (type) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::f8_e4m3: return "f8_e4m3";
    case DType::i32: return "i32";
    case DType::f64: return "f64";
  }
  return "?";
}

// A tensor in a backend's memory, seen by an op: where it starts and how it is stored.
// Shapes travel as op arguments (row-major, as documented per op).
struct Ref {
  void* data = nullptr;
  DType type = DType::f32;
};
struct CRef {
  const void* data = nullptr;
  DType type = DType::f32;
  CRef() = default;
  CRef(const void* d, DType t) : data(d), type(t) {}
  CRef(Ref r) : data(r.data), type(r.type) {}  // NOLINT: a mutable view reads as a constant one
};

inline Ref f32(float* p) { return {p, DType::f32}; }
inline CRef f32(const float* p) { return {p, DType::f32}; }

// A view `elements` further on (row offsets into a tensor).
inline Ref offset(Ref r, std::int64_t elements) {
  return {static_cast<char*>(r.data) + elements * std::int64_t(element_bytes(r.type)), r.type};
}
inline CRef offset(CRef r, std::int64_t elements) {
  return {static_cast<const char*>(r.data) + elements * std::int64_t(element_bytes(r.type)), r.type};
}

}  // namespace tessel::kernels
