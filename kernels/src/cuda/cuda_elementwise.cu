// The CUDA backend's data movement and element-wise ops: one memory-bound grid-stride kernel
// each, computing in fp32 with numeric.hpp's formulas and rounding as the CPU backend does.
// Built with --fmad=false (kernels/CMakeLists.txt) so a * b + c rounds twice as on the CPU;
// these kernels are bound by memory, not FLOPs. Row sums use a fixed order, no atomics.
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <utility>

#include "column_sums.cuh"
#include "cuda_backend_impl.hpp"
#include "cuda_elements.cuh"
#include "vector_access.cuh"

namespace tessel::kernels::cuda {

namespace {

// Calls f(Word{}) with an unsigned type as wide as one element: byte-moving ops copy
// words and do not care what the bits mean.
template <typename F>
void with_element_word(DType type, F&& f) {
  switch (element_bytes(type)) {
    case 1: f(std::uint8_t{}); return;
    case 2: f(std::uint16_t{}); return;
    case 4: f(std::uint32_t{}); return;
    default: f(std::uint64_t{}); return;
  }
}

// ---- kernels ----

template <typename T>
__global__ void fill_kernel(T* x, std::int64_t n, float value) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) store(x, i, value);
}

template <typename T>
__global__ void convert_kernel(T* destination, AnyIn source, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) store(destination, i, source[i]);
}

struct Copy2d {
  std::int64_t destination_ld, source_ld, destination_batch_stride, source_batch_stride;
  int rows, cols;
};

template <typename Word>
__global__ void copy_2d_kernel(Word* destination, const Word* source, Copy2d shape, std::int64_t n) {
  const std::int64_t block = std::int64_t(shape.rows) * shape.cols;
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const std::int64_t b = i / block, r = (i % block) / shape.cols, c = i % shape.cols;
    destination[b * shape.destination_batch_stride + r * shape.destination_ld + c] =
        source[b * shape.source_batch_stride + r * shape.source_ld + c];
  }
}

// [rows x cols] -> [cols x rows] through a shared tile, so that reads and writes are both
// along rows; the padding column keeps the tile's columns off one shared-memory bank.
constexpr int kTile = 32, kTileRows = 8;
template <typename T>
__global__ void transpose_kernel(T* destination, AnyIn source, int rows, int cols) {
  __shared__ float tile[kTile][kTile + 1];
  for (int tile_row = int(blockIdx.y) * kTile; tile_row < rows; tile_row += int(gridDim.y) * kTile) {
    for (int tile_col = int(blockIdx.x) * kTile; tile_col < cols; tile_col += int(gridDim.x) * kTile) {
      for (int k = int(threadIdx.y); k < kTile; k += kTileRows) {
        const int r = tile_row + k, c = tile_col + int(threadIdx.x);
        if (r < rows && c < cols) tile[k][threadIdx.x] = source[std::int64_t(r) * cols + c];
      }
      __syncthreads();
      for (int k = int(threadIdx.y); k < kTile; k += kTileRows) {
        const int c = tile_col + k, r = tile_row + int(threadIdx.x);
        if (r < rows && c < cols) store(destination, std::int64_t(c) * rows + r, tile[threadIdx.x][k]);
      }
      __syncthreads();
    }
  }
}

// out may be a or b: each element is read and then written by the same thread.
template <typename T>
__global__ void add_kernel(T* out, AnyIn a, AnyIn b, std::int64_t n, bool vector) {
  for_chunks(
      n,
      [&](std::int64_t i) {
        float va[kChunk], vb[kChunk];
        load_chunk(a, i, vector, va);
        load_chunk(b, i, vector, vb);
        for (int e = 0; e < kChunk; ++e) va[e] = va[e] + vb[e];
        store_chunk(out, i, vector, va);
      },
      [&](std::int64_t i) { store(out, i, a[i] + b[i]); });
}

template <typename T>
__global__ void scale_kernel(T* x, std::int64_t n, float factor, bool vector) {
  for_chunks(
      n,
      [&](std::int64_t i) {
        float v[kChunk];
        load_chunk(x, i, vector, v);
        for (int e = 0; e < kChunk; ++e) v[e] = v[e] * factor;
        store_chunk(x, i, vector, v);
      },
      [&](std::int64_t i) { store(x, i, load(x, i) * factor); });
}

// out = (x + delta) + bias[c], bias optional. A chunk stays in one row when cols is a
// multiple of 8 (the caller's `vector` requires it with a bias); otherwise each element
// finds its own column.
template <typename T>
__global__ void residual_kernel(T* out, AnyIn x, AnyIn delta, AnyIn bias, std::int64_t n, int cols, bool vector) {
  auto element = [&](std::int64_t i) {
    float value = x[i] + delta[i];
    if (bias.data) value += bias[i % cols];
    return value;
  };
  for_chunks(
      n,
      [&](std::int64_t i) {
        float v[kChunk];
        if (vector) {
          float d[kChunk], b[kChunk];
          load_chunk(x, i, true, v);
          load_chunk(delta, i, true, d);
          for (int e = 0; e < kChunk; ++e) v[e] = v[e] + d[e];
          if (bias.data) {
            load_chunk(bias, i % cols, true, b);
            for (int e = 0; e < kChunk; ++e) v[e] += b[e];
          }
        } else {
          for (int e = 0; e < kChunk; ++e) v[e] = element(i + e);
        }
        store_chunk(out, i, vector, v);
      },
      [&](std::int64_t i) { store(out, i, element(i)); });
}

template <typename T>
__global__ void add_bias_kernel(T* y, AnyIn bias, std::int64_t n, int cols) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) store(y, i, load(y, i) + bias[i % cols]);
}

// x[r] += table[base + (first + r) % period].
template <typename T>
__global__ void add_rows_kernel(T* x, AnyIn table, std::int64_t n, int cols, RowMap map) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const std::int64_t r = i / cols, c = i % cols;
    const std::int64_t at = std::int64_t(map.base) + (map.first + r) % map.period;
    store(x, i, load(x, i) + table[at * cols + c]);
  }
}

// One thread per output element: its k terms added in j order, from 0 or from out.
template <typename T>
__global__ void gather_sum_rows_kernel(T* out, AnyIn source, const std::int32_t* index, const float* scale,
                                       std::int64_t n, int k, int cols, bool accumulate) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const std::int64_t r = i / cols, c = i % cols;
    float total = accumulate ? load(out, i) : 0.0f;
    for (int j = 0; j < k; ++j) {
      const std::int64_t at = r * k + j;
      const std::int32_t from = index[at];
      if (from < 0) continue;
      const float factor = scale ? scale[at] : 1.0f;
      total = total + factor * source[std::int64_t(from) * cols + c];
    }
    store(out, i, total);
  }
}

// One thread per (table row, column): the rows of x that map to one table row are
// r0, r0 + period, ... and are added in that order (the CPU's order), with no atomics.
__global__ void add_rows_backward_kernel(AnyIn dx, float* table_gradient, int rows, int cols, int classes,
                                         RowMap map) {
  const int c = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (c >= cols) return;
  for (int r0 = int(blockIdx.y); r0 < classes; r0 += int(gridDim.y)) {
    const std::int64_t at = std::int64_t(map.base) + (map.first + r0) % map.period;
    float total = table_gradient[at * cols + c];
    for (std::int64_t r = r0; r < rows; r += map.period) total += dx[r * cols + c];
    table_gradient[at * cols + c] = total;
  }
}

struct HeadShape {
  std::int64_t rows_ld;
  int sequences, seq, head_count, head_dim;
};

// Between [sequences x seq] rows (heads side by side, row stride rows_ld) and
// [sequences x heads x seq x head_dim]; i runs over the heads layout.
template <typename Word, bool ToHeads>
__global__ void heads_kernel(const Word* from, Word* to, HeadShape shape, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const std::int64_t d = i % shape.head_dim, t = (i / shape.head_dim) % shape.seq;
    const std::int64_t h = (i / (std::int64_t(shape.head_dim) * shape.seq)) % shape.head_count;
    const std::int64_t b = i / (std::int64_t(shape.head_dim) * shape.seq * shape.head_count);
    const std::int64_t row_index = (b * shape.seq + t) * shape.rows_ld + h * shape.head_dim + d;
    if constexpr (ToHeads) to[i] = from[row_index];
    else to[row_index] = from[i];
  }
}

struct BiasColumn {
  AnyIn dy;
  int cols;
  __device__ void operator()(int r, int c, float (&v)[1]) const { v[0] = dy[std::int64_t(r) * cols + c]; }
};

}  // namespace

// ---- ops ----

void CudaBackend::fill(Stream s, Ref x, std::int64_t n, float value) {
  if (x.type == DType::f64) {
    launch_elements(native(s), n, "fill", fill_kernel<double>, static_cast<double*>(x.data), n, value);
  } else if (x.type == DType::i32) {
    launch_elements(native(s), n, "fill", fill_kernel<std::int32_t>, static_cast<std::int32_t*>(x.data), n, value);
  } else {
    with_float_type(x.type, "fill", [&](auto tag) {
      using T = decltype(tag);
      launch_elements(native(s), n, "fill", fill_kernel<T>, static_cast<T*>(x.data), n, value);
    });
  }
}

void CudaBackend::convert(Stream s, Ref destination, CRef source, std::int64_t n) {
  if (destination.type == source.type) {
    copy(s, destination.data, source.data, std::size_t(n) * element_bytes(source.type));
    return;
  }
  // fp8 is a storage type: convert is the one op that reads and writes it.
  if (source.type != DType::f8_e4m3) require_float_type(source.type, "convert");
  if (destination.type == DType::f8_e4m3) {
    launch_elements(native(s), n, "convert", convert_kernel<F8>, static_cast<F8*>(destination.data), AnyIn(source), n);
    return;
  }
  with_float_type(destination.type, "convert", [&](auto tag) {
    using T = decltype(tag);
    launch_elements(native(s), n, "convert", convert_kernel<T>, static_cast<T*>(destination.data), AnyIn(source), n);
  });
}

void CudaBackend::copy_2d(Stream s, Ref destination, std::int64_t destination_ld, CRef source, std::int64_t source_ld,
                          int rows, int cols, int batch, std::int64_t destination_batch_stride,
                          std::int64_t source_batch_stride) {
  if (destination.type != source.type) throw Error("cuda: copy_2d copies within one element type");
  if (rows <= 0 || cols <= 0 || batch <= 0) return;
  const std::size_t e = element_bytes(source.type);
  // Blocks that follow each other row after row are one strided copy, which the copy
  // engine does best.
  if (std::int64_t(rows) * batch == 1) {
    copy(s, destination.data, source.data, std::size_t(cols) * e);
    return;
  }
  const bool pitched = destination_ld >= cols && source_ld >= cols;
  const bool one_copy = pitched && (batch == 1 || (destination_batch_stride == rows * destination_ld &&
                                                   source_batch_stride == rows * source_ld));
  if (one_copy) {
    check(cudaMemcpy2DAsync(destination.data, std::size_t(destination_ld) * e, source.data, std::size_t(source_ld) * e,
                            std::size_t(cols) * e, std::size_t(rows) * std::size_t(batch), cudaMemcpyDeviceToDevice,
                            native(s)),
          "copy_2d (cudaMemcpy2DAsync)");
    return;
  }
  const Copy2d shape{destination_ld, source_ld, destination_batch_stride, source_batch_stride, rows, cols};
  const std::int64_t n = std::int64_t(batch) * rows * cols;
  with_element_word(source.type, [&](auto word) {
    using Word = decltype(word);
    launch_elements(native(s), n, "copy_2d", copy_2d_kernel<Word>, static_cast<Word*>(destination.data),
                    static_cast<const Word*>(source.data), shape, n);
  });
}

void CudaBackend::transpose(Stream s, Ref destination, CRef source, int rows, int cols) {
  if (rows <= 0 || cols <= 0) return;
  require_float_type(source.type, "transpose");
  const auto tiles = [](int extent) { return unsigned(std::min((extent + kTile - 1) / kTile, 65535)); };
  with_float_type(destination.type, "transpose", [&](auto tag) {
    using T = decltype(tag);
    transpose_kernel<T><<<dim3(tiles(cols), tiles(rows)), dim3(kTile, kTileRows), 0, native(s)>>>(
        static_cast<T*>(destination.data), AnyIn(source), rows, cols);
    check_launch("transpose");
  });
}

void CudaBackend::add(Stream s, Ref out, CRef a, CRef b, std::int64_t n) {
  require_float_type(a.type, "add");
  require_float_type(b.type, "add");
  with_float_type(out.type, "add", [&](auto tag) {
    using T = decltype(tag);
    launch_chunks(native(s), n, "add", add_kernel<T>, static_cast<T*>(out.data), AnyIn(a), AnyIn(b), n,
                  all_aligned({out.data, a.data, b.data}));
  });
}

void CudaBackend::scale(Stream s, Ref x, std::int64_t n, float factor) {
  with_float_type(x.type, "scale", [&](auto tag) {
    using T = decltype(tag);
    launch_chunks(native(s), n, "scale", scale_kernel<T>, static_cast<T*>(x.data), n, factor, all_aligned({x.data}));
  });
}

void CudaBackend::residual(Stream s, Ref out, CRef x, CRef delta, CRef bias, int rows, int cols) {
  require_float_type(x.type, "residual");
  require_float_type(delta.type, "residual");
  if (bias.data) require_float_type(bias.type, "residual");
  const std::int64_t n = std::int64_t(rows) * cols;
  with_float_type(out.type, "residual", [&](auto tag) {
    using T = decltype(tag);
    const bool vector = all_aligned({out.data, x.data, delta.data, bias.data}) && (!bias.data || cols % kChunk == 0);
    launch_chunks(native(s), n, "residual", residual_kernel<T>, static_cast<T*>(out.data), AnyIn(x), AnyIn(delta),
                  AnyIn(bias), n, cols, vector);
  });
}

void CudaBackend::add_bias(Stream s, Ref y, CRef bias, int rows, int cols) {
  require_float_type(bias.type, "add_bias");
  const std::int64_t n = std::int64_t(rows) * cols;
  with_float_type(y.type, "add_bias", [&](auto tag) {
    using T = decltype(tag);
    launch_elements(native(s), n, "add_bias", add_bias_kernel<T>, static_cast<T*>(y.data), AnyIn(bias), n, cols);
  });
}

void CudaBackend::gather_sum_rows(Stream s, Ref out, CRef source, int source_rows, const std::int32_t* index,
                                  const float* scale, int rows, int k, int cols, bool accumulate) {
  require_float_type(source.type, "gather_sum_rows");
  (void)source_rows;  // the CPU reference checks the indices; a kernel cannot throw
  const std::int64_t n = std::int64_t(rows) * cols;
  with_float_type(out.type, "gather_sum_rows", [&](auto tag) {
    using T = decltype(tag);
    launch_elements(native(s), n, "gather_sum_rows", gather_sum_rows_kernel<T>, static_cast<T*>(out.data),
                    AnyIn(source), index, scale, n, k, cols, accumulate);
  });
}

void CudaBackend::bias_gradient(Stream s, CRef dy, float* bias_gradient, int rows, int cols) {
  require_float_type(dy.type, "bias_gradient");
  if (rows <= 0 || cols <= 0) return;
  auto* scratch = static_cast<float*>(workspace(s, column_scratch_bytes(rows, cols, 1)));
  add_column_sums<1>(native(s), BiasColumn{AnyIn(dy), cols}, rows, cols, scratch, ColumnOutputs<1>{{bias_gradient}},
                     "bias_gradient");
}

void CudaBackend::add_rows(Stream s, Ref x, CRef table, int rows, int cols, RowMap map) {
  require_float_type(table.type, "add_rows");
  const std::int64_t n = std::int64_t(rows) * cols;
  with_float_type(x.type, "add_rows", [&](auto tag) {
    using T = decltype(tag);
    launch_elements(native(s), n, "add_rows", add_rows_kernel<T>, static_cast<T*>(x.data), AnyIn(table), n, cols, map);
  });
}

void CudaBackend::add_rows_backward(Stream s, CRef dx, float* table_gradient, int rows, int cols, RowMap map) {
  require_float_type(dx.type, "add_rows_backward");
  if (map.period <= 0) throw Error("cuda: add_rows_backward needs a row map period above 0");
  if (rows <= 0 || cols <= 0) return;
  const int classes = std::min(rows, map.period);
  const dim3 grid(unsigned((cols + kThreads - 1) / kThreads), unsigned(std::min(classes, 65535)));
  add_rows_backward_kernel<<<grid, kThreads, 0, native(s)>>>(AnyIn(dx), table_gradient, rows, cols, classes, map);
  check_launch("add_rows_backward");
}

void CudaBackend::rows_to_heads(Stream s, CRef source, std::int64_t source_ld, Ref heads, int sequences, int seq,
                                int head_count, int head_dim) {
  if (source.type != heads.type) throw Error("cuda: rows_to_heads keeps the element type");
  const HeadShape shape{source_ld, sequences, seq, head_count, head_dim};
  const std::int64_t n = std::int64_t(sequences) * seq * head_count * head_dim;
  with_element_word(source.type, [&](auto word) {
    using Word = decltype(word);
    launch_elements(native(s), n, "rows_to_heads", heads_kernel<Word, true>, static_cast<const Word*>(source.data),
                    static_cast<Word*>(heads.data), shape, n);
  });
}

void CudaBackend::heads_to_rows(Stream s, CRef heads, Ref destination, std::int64_t destination_ld, int sequences,
                                int seq, int head_count, int head_dim) {
  if (heads.type != destination.type) throw Error("cuda: heads_to_rows keeps the element type");
  const HeadShape shape{destination_ld, sequences, seq, head_count, head_dim};
  const std::int64_t n = std::int64_t(sequences) * seq * head_count * head_dim;
  with_element_word(heads.type, [&](auto word) {
    using Word = decltype(word);
    launch_elements(native(s), n, "heads_to_rows", heads_kernel<Word, false>, static_cast<const Word*>(heads.data),
                    static_cast<Word*>(destination.data), shape, n);
  });
}


}  // namespace tessel::kernels::cuda
