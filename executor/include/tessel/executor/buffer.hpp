// A tensor's storage in a backend's memory: element type, length, capacity. The executor holds
// every tensor in Buffers and hands their views to the backend; it never touches data itself.
// Growing allocates through the backend (or a bound BufferMemory, offload's budgeted pool);
// contents are not kept. Bytes held through the backend are counted (backend_bytes_live) for
// the memory tracer, and a current MemoryLedger is charged under the buffer's category.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "tessel/executor/memory_ledger.hpp"
#include "tessel/kernels/backend.hpp"

namespace tessel::executor {

using kernels::CRef;
using kernels::DType;
using kernels::Ref;

// Where a buffer's memory comes from when not straight from its backend.
class BufferMemory {
 public:
  virtual ~BufferMemory() = default;
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* pointer) = 0;
};

class Buffer {
 public:
  Buffer() = default;
  Buffer(kernels::Backend& backend, DType type, std::size_t count = 0);
  ~Buffer() { release(); }
  Buffer(Buffer&& other) noexcept { swap(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      release();
      swap(other);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // Binds an empty buffer to a backend and type (buffers in structs start unbound).
  void bind(kernels::Backend& backend, DType type);
  // Binds to a backend whose memory comes from `memory` (null: from the backend).
  void bind(kernels::Backend& backend, DType type, BufferMemory* memory);
  // Bytes all buffers of this process hold from their backends directly (not from a
  // BufferMemory): their capacity, counted at allocation and release.
  static std::size_t backend_bytes_live();
  // bind + the category its memory counts under.
  void bind(kernels::Backend& backend, DType type, MemoryCategory category) {
    bind(backend, type);
    set_category(category);
  }
  // What this buffer's memory is (memory_ledger.hpp); memory it holds already moves too.
  void set_category(MemoryCategory category);
  MemoryCategory category() const { return category_; }
  bool bound() const { return backend_ != nullptr; }
  // The length in elements; growing reallocates without keeping the contents.
  void resize(std::size_t count);
  // resize + fill on `stream`.
  void assign(std::size_t count, float value, Stream stream = Stream::compute);
  void release();  // frees the memory, keeps the binding
  void swap(Buffer& other) noexcept;

  std::size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  std::size_t bytes() const { return count_ * kernels::element_bytes(type_); }
  DType type() const { return type_; }
  kernels::Backend& backend() const { return *backend_; }

  Ref ref() { return {data_, type_}; }
  CRef cref() const { return {data_, type_}; }
  Ref at(std::int64_t elements) { return kernels::offset(ref(), elements); }
  CRef at(std::int64_t elements) const { return kernels::offset(cref(), elements); }
  void* data() { return data_; }
  const void* data() const { return data_; }
  // Typed pointers for fp32 / int32 buffers (statistics, gradients, optimizer state, tokens).
  float* f32();
  const float* f32() const;
  double* f64();
  std::int32_t* i32();
  const std::int32_t* i32() const;

  // Copies on `stream`: the whole of `other` (resizing this one; same type), host values
  // in (converted to this type) and out (as fp32, synchronising the stream).
  void copy_from(const Buffer& other, Stream stream = Stream::compute);
  void upload(const std::vector<float>& values, Stream stream = Stream::compute);
  void upload(const std::vector<std::int32_t>& values, Stream stream = Stream::compute);
  std::vector<float> download(Stream stream = Stream::compute) const;

 private:
  kernels::Backend* backend_ = nullptr;
  BufferMemory* memory_ = nullptr;
  DType type_ = DType::f32;
  void* data_ = nullptr;
  std::size_t count_ = 0, capacity_ = 0;
  MemoryLedger* ledger_ = nullptr;  // charged for data_, when a ledger was current
  MemoryCategory category_ = MemoryCategory::workspace;
};

inline void swap(Buffer& a, Buffer& b) noexcept { a.swap(b); }

}  // namespace tessel::executor
