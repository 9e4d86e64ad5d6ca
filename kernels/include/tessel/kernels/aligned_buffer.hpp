// Float buffers aligned to 64 bytes. Vectorised kernels (Eigen's reductions) split a
// buffer into an unaligned head and aligned packets; with every buffer on the same
// boundary the split, and so the summation order, is the same in every run, which
// keeps training bit-for-bit repeatable.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace tessel::kernels {

template <typename T, std::size_t Alignment = 64>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U, Alignment>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(Alignment))); }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t(Alignment)); }
  template <typename U>
  struct rebind {
    using other = AlignedAllocator<U, Alignment>;
  };
  bool operator==(const AlignedAllocator&) const noexcept { return true; }
  bool operator!=(const AlignedAllocator&) const noexcept { return false; }
};

using FloatBuffer = std::vector<float, AlignedAllocator<float>>;

}  // namespace tessel::kernels
