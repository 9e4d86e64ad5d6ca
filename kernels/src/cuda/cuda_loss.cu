// The CUDA backend's LM head (vocab-parallel cross-entropy phases, the fused whole-row
// softmax-cross-entropy) and embedding. No float atomics: row reductions use one block per row
// and a fixed tree, the loss sum is one fp64 value folded by one block, and the embedding
// backward walks a per-id chain of token positions so it adds in the CPU's order
// (docs/GPU.md, "Loss and embedding").
#include <string>

#include "cuda_backend_impl.hpp"
#include "row_kernels.cuh"
#include "tessel/core/error.hpp"
#include "tessel/kernels/numeric.hpp"

namespace tessel::kernels::cuda {

namespace {

constexpr int kThreads = 256;  // fixed: the reduction trees' shape depends on it


void require_floating(DType type, const char* op) {
  if (type != DType::f32 && type != DType::bf16 && type != DType::f16)
    throw Error("backend cuda: " + std::string(op) + " takes f32, bf16 or f16 tensors, not " +
                std::string(to_string(type)));
}

void require_valid_columns(int cols, int valid_cols, const char* op) {
  if (valid_cols < 0 || valid_cols > cols)
    throw Error("backend cuda: " + std::string(op) + ": valid_cols " + std::to_string(valid_cols) + " outside [0, " +
                std::to_string(cols) + "]");
}

unsigned int grid_for(std::int64_t n) {
  const std::int64_t blocks = (n + kThreads - 1) / kThreads;
  return unsigned(blocks < 1 ? 1 : (blocks > 65535 * 16 ? 65535 * 16 : blocks));
}


__global__ void row_max_kernel(const void* logits, DType type, float* row_max, int cols, int valid_cols) {
  __shared__ float shared[kThreads];
  const std::int64_t row = blockIdx.x, base = row * cols;
  float top = -INFINITY;
  for (int j = threadIdx.x; j < valid_cols; j += kThreads) {
    const float x = load_element(logits, type, base + j);
    top = x > top ? x : top;
  }
  const float result = block_reduce<kThreads>(top, shared, [](float a, float b) { return b > a ? b : a; });
  if (threadIdx.x == 0) row_max[row] = result;
}

__global__ void row_sums_kernel(const void* logits, DType type, const std::int32_t* targets, const float* row_max,
                                float* sum_exp, float* target_logit, int cols, int valid_cols, int vocab_start) {
  __shared__ float shared[kThreads];
  const std::int64_t row = blockIdx.x, base = row * cols;
  const float top = row_max[row];
  float sum = 0.0f;
  for (int j = threadIdx.x; j < valid_cols; j += kThreads)
    sum += numeric::exp_f(load_element(logits, type, base + j) - top);
  const float result = block_reduce<kThreads>(sum, shared, [](float a, float b) { return a + b; });
  if (threadIdx.x == 0) {
    sum_exp[row] = result;
    const int local = targets[row] - vocab_start;
    target_logit[row] = local >= 0 && local < valid_cols ? load_element(logits, type, base + local) : 0.0f;
  }
}

__global__ void loss_kernel(const float* row_max, const float* sum_exp, const float* target_logit, int rows,
                            double* loss_sum) {
  __shared__ double shared[kThreads];
  double total = 0.0;
  for (int r = threadIdx.x; r < rows; r += kThreads)
    total += log(double(sum_exp[r])) + double(row_max[r]) - double(target_logit[r]);
  const double result = block_reduce<kThreads>(total, shared, [](double a, double b) { return a + b; });
  if (threadIdx.x == 0) *loss_sum += result;
}

__global__ void cross_entropy_backward_kernel(const void* logits, DType type, const std::int32_t* targets,
                                              const float* row_max, const float* sum_exp, void* dlogits,
                                              DType dlogits_type, int rows, int cols, int valid_cols, int vocab_start,
                                              float scale) {
  const std::int64_t n = std::int64_t(rows) * cols;
  for (std::int64_t i = std::int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * kThreads) {
    const std::int64_t row = i / cols;
    const int col = int(i - row * cols);
    float d = 0.0f;  // padding
    if (col < valid_cols) {
      d = numeric::exp_f(load_element(logits, type, i) - row_max[row]) * (scale / sum_exp[row]);
      if (targets[row] - vocab_start == col) d -= scale;
    }
    store_element(dlogits, dlogits_type, i, d);
  }
}

// ---- the fused softmax-cross-entropy of whole rows ----

// A storage type as a template argument: the 16-bit floats are their bits, converted with
// numeric.hpp's rounding (the CPU reference's).
template <DType type>
struct Storage {
  using Word = float;
  __device__ static float load(Word w) { return w; }
  __device__ static Word store(float x) { return x; }
};
template <>
struct Storage<DType::bf16> {
  using Word = std::uint16_t;
  __device__ static float load(Word w) { return numeric::from_bf16(w); }
  __device__ static Word store(float x) { return numeric::to_bf16(x); }
};
template <>
struct Storage<DType::f16> {
  using Word = std::uint16_t;
  __device__ static float load(Word w) { return numeric::from_f16(w); }
  __device__ static Word store(float x) { return numeric::to_f16(x); }
};

constexpr int kFusedThreads = 512;  // fixed: the reduction's shape depends on it
constexpr int kWarps = kFusedThreads / 32;
constexpr int kVectorBytes = 16;  // one 128-bit load or store

// 16 bytes of elements, moved as one uint4.
template <typename Word>
union Vector {
  uint4 raw;
  Word lane[kVectorBytes / sizeof(Word)];
};

// A running softmax denominator: the sum of exp(x - max) over the elements seen.
struct Online {
  float max, sum;
};
// sum x exp(from - to); 0 for an empty sum (whose max is -inf, where exp would give NaN).
__device__ __forceinline__ float rescaled(float sum, float from, float to) {
  return sum == 0.0f ? 0.0f : sum * numeric::exp_f(from - to);
}
__device__ __forceinline__ Online combine(Online a, Online b) {
  const float top = a.max > b.max ? a.max : b.max;
  return {top, rescaled(a.sum, a.max, top) + rescaled(b.sum, b.max, top)};
}

// The block's (max, sum): a shuffle tree in each warp, then thread 0 folds the warps in
// order. Every thread gets the result.
__device__ Online block_online(Online value, Online* shared) {
  for (int offset = 16; offset > 0; offset /= 2) {
    Online other;
    other.max = __shfl_down_sync(0xffffffffu, value.max, offset);
    other.sum = __shfl_down_sync(0xffffffffu, value.sum, offset);
    value = combine(value, other);
  }
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  if (threadIdx.x == 0) {
    Online total = shared[0];
    for (int w = 1; w < kWarps; ++w) total = combine(total, shared[w]);
    shared[kWarps] = total;
  }
  __syncthreads();
  return shared[kWarps];
}

// One block per row. Pass 1 reads the row's vocabulary once for (max, sum) and thread 0
// reads the target's logit; pass 2 writes the gradient, each thread the elements it read,
// so `dlogits` may alias `logits`. 128-bit loads and stores where the row's base (in both
// tensors) is 16-byte aligned and its width a whole number of vectors; elementwise
// otherwise. Row statistics go to `stats` (max, sum, target logit: 3 arrays of `rows`).
template <DType type>
__global__ void __launch_bounds__(kFusedThreads)
    fused_cross_entropy_kernel(const typename Storage<type>::Word* logits, const std::int32_t* targets,
                               typename Storage<type>::Word* dlogits, int rows, int cols, int valid_cols, float scale,
                               float* stats) {
  using S = Storage<type>;
  using Word = typename S::Word;
  constexpr int lanes = kVectorBytes / int(sizeof(Word));
  __shared__ Online shared[kWarps + 1];
  const std::int64_t row = blockIdx.x;
  const Word* x = logits + row * cols;
  Word* d = dlogits + row * cols;
  const bool vectors = cols % lanes == 0 && reinterpret_cast<std::uintptr_t>(x) % kVectorBytes == 0 &&
                       reinterpret_cast<std::uintptr_t>(d) % kVectorBytes == 0;
  const int target = targets[row];
  const bool has_target = target >= 0 && target < valid_cols;
  float target_logit = 0.0f;
  if (threadIdx.x == 0 && has_target) target_logit = S::load(x[target]);  // before any thread writes the row

  Online mine{-INFINITY, 0.0f};
  if (vectors) {
    // Each vector's max first, so a vector costs at most one rescaling.
    const int valid_vectors = (valid_cols + lanes - 1) / lanes;
    for (int v = threadIdx.x; v < valid_vectors; v += kFusedThreads) {
      Vector<Word> in;
      in.raw = reinterpret_cast<const uint4*>(x)[v];
      float value[lanes];
      float top = mine.max;
      for (int k = 0; k < lanes; ++k) {
        value[k] = v * lanes + k < valid_cols ? S::load(in.lane[k]) : -INFINITY;
        top = value[k] > top ? value[k] : top;
      }
      float sum = rescaled(mine.sum, mine.max, top);
      for (int k = 0; k < lanes; ++k) sum += v * lanes + k < valid_cols ? numeric::exp_f(value[k] - top) : 0.0f;
      mine = {top, sum};
    }
  } else {
    for (int j = threadIdx.x; j < valid_cols; j += kFusedThreads) mine = combine(mine, Online{S::load(x[j]), 1.0f});
  }
  const Online total = block_online(mine, shared);  // its barriers order every read above before any write below
  if (threadIdx.x == 0) {
    stats[row] = total.max;
    stats[rows + row] = total.sum;
    stats[2 * std::int64_t(rows) + row] = target_logit;
  }

  const float factor = scale / total.sum;
  auto gradient = [&](int column, float value) {
    if (column >= valid_cols) return 0.0f;  // padding
    float g = numeric::exp_f(value - total.max) * factor;
    if (column == target) g -= scale;
    return g;
  };
  if (vectors) {
    for (int v = threadIdx.x; v < cols / lanes; v += kFusedThreads) {
      Vector<Word> io;
      io.raw = reinterpret_cast<const uint4*>(x)[v];
      for (int k = 0; k < lanes; ++k) io.lane[k] = S::store(gradient(v * lanes + k, S::load(io.lane[k])));
      reinterpret_cast<uint4*>(d)[v] = io.raw;
    }
  } else {
    for (int j = threadIdx.x; j < cols; j += kFusedThreads) d[j] = S::store(gradient(j, S::load(x[j])));
  }
}

template <DType type>
void launch_fused_cross_entropy(cudaStream_t stream, CRef logits, const std::int32_t* targets, Ref dlogits, int rows,
                                int cols, int valid_cols, float scale, float* stats) {
  using Word = typename Storage<type>::Word;
  fused_cross_entropy_kernel<type><<<unsigned(rows), kFusedThreads, 0, stream>>>(
      static_cast<const Word*>(logits.data), targets, static_cast<Word*>(dlogits.data), rows, cols, valid_cols, scale,
      stats);
}

// Element copies in the table's own type (Word: the element's bytes as one integer).
template <typename Word>
__global__ void embedding_forward_kernel(const std::int32_t* tokens, const Word* table, Word* out, int n, int dim,
                                         int vocab_start, int vocab_rows) {
  const std::int64_t total = std::int64_t(n) * dim;
  for (std::int64_t i = std::int64_t(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * kThreads) {
    const std::int64_t position = i / dim, column = i - position * dim;
    const int local = tokens[position] - vocab_start;
    out[i] = local >= 0 && local < vocab_rows ? table[std::int64_t(local) * dim + column] : Word(0);  // +0.0
  }
}

// next[i]: the next position with token i's id (-1: none); first[i]: 1 when i is the id's
// first in-shard position. One thread per token, the tokens read through shared tiles.
__global__ void token_chain_kernel(const std::int32_t* tokens, int n, int vocab_start, int vocab_rows,
                                   std::int32_t* next, std::int32_t* first) {
  __shared__ std::int32_t tile[kThreads];
  const int i = int(blockIdx.x) * kThreads + int(threadIdx.x);
  const std::int32_t token = i < n ? tokens[i] : 0;
  const bool in_shard = i < n && token - vocab_start >= 0 && token - vocab_start < vocab_rows;
  int following = -1;
  bool earlier = false;
  for (int start = 0; start < n; start += kThreads) {
    __syncthreads();
    if (start + int(threadIdx.x) < n) tile[threadIdx.x] = tokens[start + threadIdx.x];
    __syncthreads();
    const int count = n - start < kThreads ? n - start : kThreads;
    for (int k = 0; k < count; ++k) {
      const int j = start + k;
      if (tile[k] != token) continue;
      if (j < i) earlier = true;
      if (j > i && following < 0) following = j;
    }
  }
  if (i < n) {
    next[i] = following;
    first[i] = in_shard && !earlier ? 1 : 0;
  }
}

// One block per token position; those that start a chain sum it into their row. Thread 0
// follows the chain kThreads links at a time into shared memory, so the pointer chase runs
// once per chain, not once per column; the row is carried through registers in between
// (a store and a reload of a float change nothing), so the sums keep token order.
__global__ void embedding_backward_kernel(const std::int32_t* tokens, const void* dout, DType type,
                                          const std::int32_t* next, const std::int32_t* first, float* table_gradient,
                                          int dim, int vocab_start) {
  __shared__ std::int32_t positions[kThreads];
  __shared__ int count, resume;
  const int start = int(blockIdx.x);
  if (!first[start]) return;  // the whole block leaves together
  float* row = table_gradient + std::int64_t(tokens[start] - vocab_start) * dim;
  if (threadIdx.x == 0) resume = start;
  for (;;) {
    if (threadIdx.x == 0) {
      int link = resume, k = 0;
      for (; k < kThreads && link >= 0; ++k, link = next[link]) positions[k] = link;
      count = k;
      resume = link;
    }
    __syncthreads();
    for (int column = threadIdx.x; column < dim; column += kThreads) {
      float sum = row[column];
      for (int k = 0; k < count; ++k) sum += load_element(dout, type, std::int64_t(positions[k]) * dim + column);
      row[column] = sum;
    }
    const bool more = resume >= 0;
    __syncthreads();  // everyone has read this chunk before thread 0 fetches the next
    if (!more) return;
  }
}

}  // namespace

void CudaBackend::cross_entropy_max(Stream s, CRef logits, float* row_max, int rows, int cols, int valid_cols) {
  require_floating(logits.type, "cross_entropy_max");
  require_valid_columns(cols, valid_cols, "cross_entropy_max");
  if (rows <= 0) return;
  row_max_kernel<<<unsigned(rows), kThreads, 0, native(s)>>>(logits.data, logits.type, row_max, cols, valid_cols);
  check(cudaGetLastError(), "cross_entropy_max");
}

void CudaBackend::cross_entropy_sums(Stream s, CRef logits, const std::int32_t* targets, const float* row_max,
                                     float* sum_exp, float* target_logit, int rows, int cols, int valid_cols,
                                     int vocab_start) {
  require_floating(logits.type, "cross_entropy_sums");
  require_valid_columns(cols, valid_cols, "cross_entropy_sums");
  if (rows <= 0) return;
  row_sums_kernel<<<unsigned(rows), kThreads, 0, native(s)>>>(logits.data, logits.type, targets, row_max, sum_exp,
                                                              target_logit, cols, valid_cols, vocab_start);
  check(cudaGetLastError(), "cross_entropy_sums");
}

void CudaBackend::cross_entropy_loss(Stream s, const float* row_max, const float* sum_exp, const float* target_logit,
                                     int rows, double* loss_sum) {
  // One block even for rows == 0: the sum then adds 0, like the reference.
  loss_kernel<<<1, kThreads, 0, native(s)>>>(row_max, sum_exp, target_logit, rows, loss_sum);
  check(cudaGetLastError(), "cross_entropy_loss");
}

void CudaBackend::cross_entropy_backward(Stream s, CRef logits, const std::int32_t* targets, const float* row_max,
                                         const float* sum_exp, Ref dlogits, int rows, int cols, int valid_cols,
                                         int vocab_start, float scale) {
  require_floating(logits.type, "cross_entropy_backward");
  require_floating(dlogits.type, "cross_entropy_backward");
  require_valid_columns(cols, valid_cols, "cross_entropy_backward");
  const std::int64_t n = std::int64_t(rows) * cols;
  if (n <= 0) return;
  cross_entropy_backward_kernel<<<grid_for(n), kThreads, 0, native(s)>>>(logits.data, logits.type, targets, row_max,
                                                                         sum_exp, dlogits.data, dlogits.type, rows,
                                                                         cols, valid_cols, vocab_start, scale);
  check(cudaGetLastError(), "cross_entropy_backward");
}

void CudaBackend::cross_entropy_fused(Stream s, CRef logits, const std::int32_t* targets, Ref dlogits, int rows,
                                      int cols, int valid_cols, float scale, double* loss_sum) {
  require_floating(logits.type, "cross_entropy_fused");
  require_valid_columns(cols, valid_cols, "cross_entropy_fused");
  if (dlogits.type != logits.type) {
    throw Error("backend cuda: cross_entropy_fused writes dlogits in the logits' element type (" +
                std::string(to_string(logits.type)) + "), not " + std::string(to_string(dlogits.type)));
  }
  if (rows <= 0) return;
  // The rows' (max, sum, target logit), then the loss block over them in row order.
  auto* stats = static_cast<float*>(workspace(s, 3 * std::size_t(rows) * sizeof(float)));
  switch (logits.type) {
    case DType::bf16:
      launch_fused_cross_entropy<DType::bf16>(native(s), logits, targets, dlogits, rows, cols, valid_cols, scale,
                                              stats);
      break;
    case DType::f16:
      launch_fused_cross_entropy<DType::f16>(native(s), logits, targets, dlogits, rows, cols, valid_cols, scale, stats);
      break;
    default:
      launch_fused_cross_entropy<DType::f32>(native(s), logits, targets, dlogits, rows, cols, valid_cols, scale, stats);
  }
  check(cudaGetLastError(), "cross_entropy_fused");
  loss_kernel<<<1, kThreads, 0, native(s)>>>(stats, stats + rows, stats + 2 * std::size_t(rows), rows, loss_sum);
  check(cudaGetLastError(), "cross_entropy_fused (loss)");
}

void CudaBackend::embedding_forward(Stream s, const std::int32_t* tokens, CRef table, Ref out, int n, int dim,
                                    int vocab_start, int vocab_rows) {
  if (table.type != out.type)
    throw Error("backend cuda: embedding_forward copies rows in their element type (" +
                std::string(to_string(table.type)) + " table, " + std::string(to_string(out.type)) + " output)");
  const std::int64_t total = std::int64_t(n) * dim;
  if (total <= 0) return;
  const unsigned grid = grid_for(total);
  switch (element_bytes(table.type)) {
    case 4:
      embedding_forward_kernel<<<grid, kThreads, 0, native(s)>>>(tokens, static_cast<const std::uint32_t*>(table.data),
                                                                 static_cast<std::uint32_t*>(out.data), n, dim,
                                                                 vocab_start, vocab_rows);
      break;
    case 2:
      embedding_forward_kernel<<<grid, kThreads, 0, native(s)>>>(tokens, static_cast<const std::uint16_t*>(table.data),
                                                                 static_cast<std::uint16_t*>(out.data), n, dim,
                                                                 vocab_start, vocab_rows);
      break;
    default:
      require_floating(table.type, "embedding_forward");
  }
  check(cudaGetLastError(), "embedding_forward");
}

void CudaBackend::embedding_backward(Stream s, const std::int32_t* tokens, CRef dout, float* table_gradient, int n,
                                     int dim, int vocab_start, int vocab_rows) {
  require_floating(dout.type, "embedding_backward");
  if (n <= 0 || dim <= 0) return;
  auto* next = static_cast<std::int32_t*>(workspace(s, 2 * std::size_t(n) * sizeof(std::int32_t)));
  std::int32_t* first = next + n;
  token_chain_kernel<<<unsigned((n + kThreads - 1) / kThreads), kThreads, 0, native(s)>>>(tokens, n, vocab_start,
                                                                                          vocab_rows, next, first);
  check(cudaGetLastError(), "embedding_backward (token chains)");
  embedding_backward_kernel<<<unsigned(n), kThreads, 0, native(s)>>>(tokens, dout.data, dout.type, next, first,
                                                                     table_gradient, dim, vocab_start);
  check(cudaGetLastError(), "embedding_backward");
}

}  // namespace tessel::kernels::cuda
