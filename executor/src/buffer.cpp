#include "tessel/executor/buffer.hpp"

#include <atomic>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::executor {

namespace {
std::atomic<std::size_t> backend_bytes{0};
}  // namespace

std::size_t Buffer::backend_bytes_live() { return backend_bytes.load(); }

Buffer::Buffer(kernels::Backend& backend, DType type, std::size_t count) : backend_(&backend), type_(type) {
  resize(count);
}

void Buffer::bind(kernels::Backend& backend, DType type) {
  TESSEL_ASSERT(data_ == nullptr || (backend_ == &backend && type_ == type), "a buffer with memory keeps its binding");
  backend_ = &backend;
  type_ = type;
}

void Buffer::bind(kernels::Backend& backend, DType type, BufferMemory* memory) {
  TESSEL_ASSERT(data_ == nullptr || memory_ == memory, "a buffer with memory keeps its source");
  bind(backend, type);
  memory_ = memory;
}

void Buffer::set_category(MemoryCategory category) {
  if (data_ && ledger_) ledger_->moved(category_, category, capacity_ * kernels::element_bytes(type_));
  category_ = category;
}

void Buffer::resize(std::size_t count) {
  TESSEL_ASSERT(backend_ != nullptr, "a buffer must be bound to a backend before it holds data");
  if (count > capacity_) {
    release();
    const std::size_t bytes = count * kernels::element_bytes(type_);
    data_ = memory_ ? memory_->allocate(bytes) : backend_->allocate(bytes);
    if (!memory_) backend_bytes += bytes;
    capacity_ = count;
    ledger_ = MemoryLedger::current();
    if (ledger_) ledger_->allocated(category_, count * kernels::element_bytes(type_));
  }
  count_ = count;
}

void Buffer::assign(std::size_t count, float value, Stream stream) {
  resize(count);
  if (count > 0) backend_->fill(stream, ref(), std::int64_t(count), value);
}

void Buffer::release() {
  if (data_ && memory_) {
    memory_->deallocate(data_);
  } else if (data_) {
    backend_->deallocate(data_);
    backend_bytes -= capacity_ * kernels::element_bytes(type_);
  }
  if (data_ && ledger_) ledger_->freed(category_, capacity_ * kernels::element_bytes(type_));
  ledger_ = nullptr;
  data_ = nullptr;
  count_ = capacity_ = 0;
}

void Buffer::swap(Buffer& other) noexcept {
  std::swap(backend_, other.backend_);
  std::swap(memory_, other.memory_);
  std::swap(type_, other.type_);
  std::swap(data_, other.data_);
  std::swap(count_, other.count_);
  std::swap(capacity_, other.capacity_);
  std::swap(ledger_, other.ledger_);
  std::swap(category_, other.category_);
}

float* Buffer::f32() {
  TESSEL_ASSERT(type_ == DType::f32, "an fp32 view of an fp32 buffer");
  return static_cast<float*>(data_);
}
const float* Buffer::f32() const {
  TESSEL_ASSERT(type_ == DType::f32, "an fp32 view of an fp32 buffer");
  return static_cast<const float*>(data_);
}
double* Buffer::f64() {
  TESSEL_ASSERT(type_ == DType::f64, "an fp64 view of an fp64 buffer");
  return static_cast<double*>(data_);
}
std::int32_t* Buffer::i32() {
  TESSEL_ASSERT(type_ == DType::i32, "an int32 view of an int32 buffer");
  return static_cast<std::int32_t*>(data_);
}
const std::int32_t* Buffer::i32() const {
  TESSEL_ASSERT(type_ == DType::i32, "an int32 view of an int32 buffer");
  return static_cast<const std::int32_t*>(data_);
}

void Buffer::copy_from(const Buffer& other, Stream stream) {
  if (!backend_) bind(other.backend(), other.type());
  TESSEL_ASSERT(other.type() == type_, "copy_from keeps the element type");
  resize(other.size());
  if (count_ > 0 && data_ != other.data()) backend_->copy(stream, data_, other.data(), bytes());
}

void Buffer::upload(const std::vector<float>& values, Stream stream) {
  resize(values.size());
  if (values.empty()) return;
  if (type_ == DType::f32) {
    backend_->upload(stream, data_, values.data(), bytes());
    backend_->synchronize(stream);  // the host vector may go away
    return;
  }
  // Convert on the device side: upload fp32 into scratch, then convert.
  Buffer staging(*backend_, DType::f32, values.size());
  backend_->upload(stream, staging.data(), values.data(), staging.bytes());
  backend_->convert(stream, ref(), staging.cref(), std::int64_t(count_));
  backend_->synchronize(stream);
}

void Buffer::upload(const std::vector<std::int32_t>& values, Stream stream) {
  TESSEL_ASSERT(type_ == DType::i32, "int32 values go to an int32 buffer");
  resize(values.size());
  if (values.empty()) return;
  backend_->upload(stream, data_, values.data(), bytes());
  backend_->synchronize(stream);
}

std::vector<float> Buffer::download(Stream stream) const {
  std::vector<float> out(count_);
  if (count_ == 0) return out;
  if (type_ == DType::f32) {
    backend_->download(stream, out.data(), data_, bytes());
  } else {
    Buffer staging(*backend_, DType::f32, count_);
    backend_->convert(stream, staging.ref(), cref(), std::int64_t(count_));
    backend_->download(stream, out.data(), staging.data(), staging.bytes());
    backend_->synchronize(stream);
    return out;
  }
  backend_->synchronize(stream);
  return out;
}

}  // namespace tessel::executor
