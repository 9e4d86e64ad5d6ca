// Deterministic sums over the rows of each column (bias gradients, dgamma, dbeta) without
// floating-point atomics: rows are cut into chunks fixed by the shape alone (column_chunks.hpp),
// each chunk's partial is summed in row order, then the partials in chunk order, so a shape
// gives the same bits on every run and enough blocks even with few columns.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "column_chunks.hpp"
#include "cuda_elements.cuh"

namespace tessel::kernels::cuda {

template <int Outputs>
struct ColumnOutputs {
  float* to[Outputs];
};

// `value(r, c, v)` writes the Outputs values row r, column c adds to the sums.
template <int Outputs, typename Value>
__global__ void column_partials_kernel(Value value, int rows, int cols, ColumnChunks chunks, float* partials) {
  const int c = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (c >= cols) return;
  const int chunk = int(blockIdx.y);
  const int begin = chunk * chunks.rows_each;
  const int end = begin + chunks.rows_each < rows ? begin + chunks.rows_each : rows;
  float sums[Outputs];
  for (int o = 0; o < Outputs; ++o) sums[o] = 0.0f;
  for (int r = begin; r < end; ++r) {
    float v[Outputs];
    value(r, c, v);
    for (int o = 0; o < Outputs; ++o) sums[o] += v[o];
  }
  for (int o = 0; o < Outputs; ++o) partials[(std::int64_t(o) * chunks.count + chunk) * cols + c] = sums[o];
}

template <int Outputs>
__global__ void column_totals_kernel(const float* partials, int cols, int chunk_count, ColumnOutputs<Outputs> out) {
  const int c = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (c >= cols) return;
  for (int o = 0; o < Outputs; ++o) {
    float total = 0.0f;
    for (int k = 0; k < chunk_count; ++k) total += partials[(std::int64_t(o) * chunk_count + k) * cols + c];
    out.to[o][c] += total;
  }
}

// out[o][c] += sum over r of value(r, c)[o], on `stream`; `scratch` holds at least
// column_scratch_bytes(rows, cols, Outputs) and is not read by anything else meanwhile.
template <int Outputs, typename Value>
void add_column_sums(cudaStream_t stream, const Value& value, int rows, int cols, float* scratch,
                     ColumnOutputs<Outputs> out, const char* op) {
  if (rows <= 0 || cols <= 0) return;
  const ColumnChunks chunks = column_chunks(rows);
  const unsigned column_blocks = unsigned((cols + kThreads - 1) / kThreads);
  column_partials_kernel<Outputs><<<dim3(column_blocks, unsigned(chunks.count)), kThreads, 0, stream>>>(
      value, rows, cols, chunks, scratch);
  check_launch(op);
  column_totals_kernel<Outputs><<<column_blocks, kThreads, 0, stream>>>(scratch, cols, chunks.count, out);
  check_launch(op);
}

}  // namespace tessel::kernels::cuda
