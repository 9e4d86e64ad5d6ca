// How column_sums.cuh cuts a tensor's rows into chunks: a function of the row count
// alone, so the order in which a column's rows are added, and so its bits, is the same on
// every run. Plain C++ (no CUDA) so that a CPU test can check the cut.
#pragma once

#include <cstddef>

namespace tessel::kernels::cuda {

// At most kMaxChunks chunks (the partials stay small), of at least kMinChunkRows rows
// when there are that many (each thread has some rows to add).
constexpr int kMaxChunks = 64;
constexpr int kMinChunkRows = 32;

// `count` chunks of `rows_each` rows, the last one possibly shorter but never empty.
struct ColumnChunks {
  int count = 1, rows_each = 1;
};

inline ColumnChunks column_chunks(int rows) {
  if (rows <= 0) return {};
  int count = rows / kMinChunkRows;
  count = count < 1 ? 1 : (count > kMaxChunks ? kMaxChunks : count);
  const int rows_each = (rows + count - 1) / count;
  return {(rows + rows_each - 1) / rows_each, rows_each};
}

// Scratch the partials of `outputs` sums over `cols` columns take.
inline std::size_t column_scratch_bytes(int rows, int cols, int outputs) {
  return std::size_t(column_chunks(rows).count) * std::size_t(cols) * std::size_t(outputs) * sizeof(float);
}

}  // namespace tessel::kernels::cuda
