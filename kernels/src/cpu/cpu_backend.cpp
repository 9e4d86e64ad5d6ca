// The CPU backend: host memory, the calling thread as every stream, wall-clock marks, and
// the data-movement and element-wise ops. Buffers are 64-byte aligned for Eigen's
// packets; results do not rely on it: reductions and transcendental functions run in a
// form that does not depend on a row's address (cpu_backend.hpp says how).
#include "cpu_backend.hpp"

#include <algorithm>
#include <new>

#include <fmt/format.h>

#include "tessel/kernels/numeric.hpp"

namespace tessel::kernels {

namespace cpu {

namespace {
constexpr std::align_val_t kAlignment{64};

float load(const void* data, DType type, std::int64_t i) {
  switch (type) {
    case DType::f32: return static_cast<const float*>(data)[i];
    case DType::bf16: return numeric::from_bf16(static_cast<const std::uint16_t*>(data)[i]);
    case DType::f16: return numeric::from_f16(static_cast<const std::uint16_t*>(data)[i]);
    case DType::f8_e4m3: return numeric::from_f8_e4m3(static_cast<const std::uint8_t*>(data)[i]);
    default: break;
  }
  throw Error(fmt::format("internal: the cpu backend reads no {} tensors", to_string(type)));
}

void store(void* data, DType type, std::int64_t i, float value) {
  switch (type) {
    case DType::f32: static_cast<float*>(data)[i] = value; return;
    case DType::bf16: static_cast<std::uint16_t*>(data)[i] = numeric::to_bf16(value); return;
    case DType::f16: static_cast<std::uint16_t*>(data)[i] = numeric::to_f16(value); return;
    case DType::f8_e4m3: static_cast<std::uint8_t*>(data)[i] = numeric::to_f8_e4m3(value); return;
    default: break;
  }
  throw Error(fmt::format("internal: the cpu backend writes no {} tensors", to_string(type)));
}
}  // namespace

FloatIn::FloatIn(CRef ref, std::int64_t n) {
  if (ref.type == DType::f32 || ref.data == nullptr) {
    data_ = static_cast<const float*>(ref.data);
    return;
  }
  scratch_.resize(std::size_t(n));
  for (std::int64_t i = 0; i < n; ++i) scratch_[std::size_t(i)] = load(ref.data, ref.type, i);
  data_ = scratch_.data();
}

FloatOut::FloatOut(Ref ref, std::int64_t n, bool load_values) : ref_(ref), n_(n) {
  if (ref.type == DType::f32 || ref.data == nullptr) {
    data_ = static_cast<float*>(ref.data);
    return;
  }
  scratch_.resize(std::size_t(n));
  if (load_values) {
    for (std::int64_t i = 0; i < n; ++i) scratch_[std::size_t(i)] = load(ref.data, ref.type, i);
  }
  data_ = scratch_.data();
}

FloatOut::~FloatOut() {
  if (scratch_.empty()) return;
  for (std::int64_t i = 0; i < n_; ++i) store(ref_.data, ref_.type, i, scratch_[std::size_t(i)]);
}

void convert_elements(Ref destination, CRef source, std::int64_t n) {
  if (destination.type == source.type) {
    if (destination.data != source.data) std::memmove(destination.data, source.data, std::size_t(n) * element_bytes(source.type));
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) store(destination.data, destination.type, i, load(source.data, source.type, i));
}

void* CpuBackend::allocate(std::size_t bytes) { return ::operator new(std::max<std::size_t>(bytes, 1), kAlignment); }

void CpuBackend::deallocate(void* pointer) {
  if (pointer) ::operator delete(pointer, kAlignment);
}

TimeMark CpuBackend::mark(Stream) {
  marks_.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count());
  return TimeMark(marks_.size() - 1);
}

// ---- data movement and element-wise ----

void CpuBackend::fill(Stream, Ref x, std::int64_t n, float value) {
  switch (x.type) {
    case DType::f32: std::fill_n(static_cast<float*>(x.data), n, value); return;
    case DType::f64: std::fill_n(static_cast<double*>(x.data), n, double(value)); return;
    case DType::i32: std::fill_n(static_cast<std::int32_t*>(x.data), n, std::int32_t(value)); return;
    default: break;
  }
  for (std::int64_t i = 0; i < n; ++i) store(x.data, x.type, i, value);
}

void CpuBackend::copy_2d(Stream, Ref destination, std::int64_t destination_ld, CRef source, std::int64_t source_ld,
                         int rows, int cols, int batch, std::int64_t destination_batch_stride,
                         std::int64_t source_batch_stride) {
  TESSEL_ASSERT(destination.type == source.type, "copy_2d copies within one element type");
  const std::size_t e = element_bytes(source.type);
  for (int b = 0; b < batch; ++b) {
    for (int r = 0; r < rows; ++r) {
      const std::int64_t to = b * destination_batch_stride + r * destination_ld, from = b * source_batch_stride + r * source_ld;
      std::memmove(static_cast<char*>(destination.data) + to * std::int64_t(e),
                   static_cast<const char*>(source.data) + from * std::int64_t(e), std::size_t(cols) * e);
    }
  }
}

void CpuBackend::transpose(Stream, Ref destination, CRef source, int rows, int cols) {
  const std::int64_t n = std::int64_t(rows) * cols;
  FloatIn in(source, n);
  FloatOut out(destination, n, false);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) out.get()[std::size_t(c) * rows + r] = in.get()[std::size_t(r) * cols + c];
}

void CpuBackend::add(Stream, Ref out, CRef a, CRef b, std::int64_t n) {
  FloatIn x(a, n), y(b, n);
  FloatOut z(out, n, false);
  for (std::int64_t i = 0; i < n; ++i) z.get()[i] = x.get()[i] + y.get()[i];
}

void CpuBackend::scale(Stream, Ref x, std::int64_t n, float factor) {
  FloatOut y(x, n, true);
  Eigen::Map<Eigen::ArrayXf>(y.get(), n) *= factor;
}


void CpuBackend::residual(Stream, Ref out, CRef x, CRef delta, CRef bias, int rows, int cols) {
  const std::int64_t n = std::int64_t(rows) * cols;
  FloatIn a(x, n), d(delta, n), b(bias, bias.data ? cols : 0);
  FloatOut y(out, n, false);
  for (std::int64_t i = 0; i < n; ++i) y.get()[i] = a.get()[i] + d.get()[i];
  if (!bias.data) return;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) y.get()[std::size_t(r) * cols + c] += b.get()[c];
}

void CpuBackend::add_bias(Stream, Ref y, CRef bias, int rows, int cols) {
  FloatIn b(bias, cols);
  FloatOut out(y, std::int64_t(rows) * cols, true);
  for (int r = 0; r < rows; ++r) {
    float* row = out.get() + std::size_t(r) * cols;
    for (int c = 0; c < cols; ++c) row[c] += b.get()[c];
  }
}

void CpuBackend::bias_gradient(Stream, CRef dy, float* bias_gradient, int rows, int cols) {
  FloatIn d(dy, std::int64_t(rows) * cols);
  for (int r = 0; r < rows; ++r) {
    const float* row = d.get() + std::size_t(r) * cols;
    for (int c = 0; c < cols; ++c) bias_gradient[c] += row[c];
  }
}

void CpuBackend::add_rows(Stream, Ref x, CRef table, int rows, int cols, RowMap map) {
  FloatOut out(x, std::int64_t(rows) * cols, true);
  for (int r = 0; r < rows; ++r) {
    const std::int64_t at = std::int64_t(map.base) + (map.first + r) % map.period;
    FloatIn row(offset(table, at * cols), cols);
    float* to = out.get() + std::size_t(r) * cols;
    for (int c = 0; c < cols; ++c) to[c] += row.get()[c];
  }
}

void CpuBackend::add_rows_backward(Stream, CRef dx, float* table_gradient, int rows, int cols, RowMap map) {
  FloatIn d(dx, std::int64_t(rows) * cols);
  for (int r = 0; r < rows; ++r) {
    float* to = table_gradient + (std::int64_t(map.base) + (map.first + r) % map.period) * cols;
    const float* g = d.get() + std::size_t(r) * cols;
    for (int c = 0; c < cols; ++c) to[c] += g[c];
  }
}

void CpuBackend::gather_sum_rows(Stream, Ref out, CRef source, int source_rows, const std::int32_t* index,
                                 const float* scale, int rows, int k, int cols, bool accumulate) {
  FloatIn from(source, std::int64_t(source_rows) * cols);
  FloatOut to(out, std::int64_t(rows) * cols, accumulate);
  for (int r = 0; r < rows; ++r) {
    float* row = to.get() + std::size_t(r) * std::size_t(cols);
    if (!accumulate) std::fill(row, row + cols, 0.0f);
    for (int j = 0; j < k; ++j) {
      const std::int64_t at = std::int64_t(r) * k + j;
      if (index[at] < 0) continue;
      TESSEL_ASSERT(index[at] < source_rows, "gather_sum_rows: an index beyond the source rows");
      const float factor = scale ? scale[at] : 1.0f;
      const float* src = from.get() + std::size_t(index[at]) * std::size_t(cols);
      for (int c = 0; c < cols; ++c) row[c] = row[c] + factor * src[c];
    }
  }
}

void CpuBackend::rows_to_heads(Stream, CRef source, std::int64_t source_ld, Ref heads, int sequences, int seq,
                               int head_count, int head_dim) {
  TESSEL_ASSERT(source.type == heads.type, "rows_to_heads keeps the element type");
  const std::size_t e = element_bytes(source.type);
  for (int b = 0; b < sequences; ++b)
    for (int h = 0; h < head_count; ++h)
      for (int t = 0; t < seq; ++t) {
        const std::int64_t from = (std::int64_t(b) * seq + t) * source_ld + std::int64_t(h) * head_dim;
        const std::int64_t to = ((std::int64_t(b) * head_count + h) * seq + t) * head_dim;
        std::memcpy(static_cast<char*>(heads.data) + to * std::int64_t(e),
                    static_cast<const char*>(source.data) + from * std::int64_t(e), std::size_t(head_dim) * e);
      }
}

void CpuBackend::heads_to_rows(Stream, CRef heads, Ref destination, std::int64_t destination_ld, int sequences,
                               int seq, int head_count, int head_dim) {
  TESSEL_ASSERT(heads.type == destination.type, "heads_to_rows keeps the element type");
  const std::size_t e = element_bytes(heads.type);
  for (int b = 0; b < sequences; ++b)
    for (int h = 0; h < head_count; ++h)
      for (int t = 0; t < seq; ++t) {
        const std::int64_t to = (std::int64_t(b) * seq + t) * destination_ld + std::int64_t(h) * head_dim;
        const std::int64_t from = ((std::int64_t(b) * head_count + h) * seq + t) * head_dim;
        std::memcpy(static_cast<char*>(destination.data) + to * std::int64_t(e),
                    static_cast<const char*>(heads.data) + from * std::int64_t(e), std::size_t(head_dim) * e);
      }
}

}  // namespace cpu


Backend& cpu_backend() {
  static cpu::CpuBackend backend;
  return backend;
}

}  // namespace tessel::kernels
