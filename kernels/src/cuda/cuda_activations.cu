// The CUDA backend's activations: GELU and SwiGLU forward and backward, moving chunks of
// eight elements (vector_access.cuh), and RoPE. Every element is computed in fp32 with
// numeric.hpp's formulas and rounded like the CPU backend rounds; built with --fmad=false
// like the other memory-bound kernels (kernels/CMakeLists.txt).
#include <cmath>

#include "cuda_backend_impl.hpp"
#include "cuda_elements.cuh"
#include "vector_access.cuh"

namespace tessel::kernels::cuda {

namespace {

template <typename T>
__global__ void gelu_forward_kernel(AnyIn x, T* y, std::int64_t n, bool vector) {
  for_chunks(
      n,
      [&](std::int64_t i) {
        float v[kChunk];
        load_chunk(x, i, vector, v);
        for (int e = 0; e < kChunk; ++e) v[e] = numeric::gelu(v[e]);
        store_chunk(y, i, vector, v);
      },
      [&](std::int64_t i) { store(y, i, numeric::gelu(x[i])); });
}

template <typename T>
__global__ void gelu_backward_kernel(AnyIn x, AnyIn dy, T* dx, std::int64_t n, bool vector) {
  for_chunks(
      n,
      [&](std::int64_t i) {
        float vx[kChunk], vdy[kChunk];
        load_chunk(x, i, vector, vx);
        load_chunk(dy, i, vector, vdy);
        for (int e = 0; e < kChunk; ++e) vx[e] = vdy[e] * numeric::gelu_derivative(vx[e]);
        store_chunk(dx, i, vector, vx);
      },
      [&](std::int64_t i) { store(dx, i, dy[i] * numeric::gelu_derivative(x[i])); });
}

// x [rows x 2f]: the gate in the first f columns, the up projection in the last f. Output
// element i is row i / f, column i % f; a chunk of eight stays in one row when f is a
// multiple of 8, which the caller's `vector` requires (else the chunk is read element by
// element, each finding its own row).
__device__ __forceinline__ std::int64_t gate_index(std::int64_t i, int f) { return (i / f) * 2 * f + i % f; }

template <typename T>
__global__ void swiglu_forward_kernel(AnyIn x, T* y, std::int64_t n, int f, bool vector) {
  for_chunks(
      n,
      [&](std::int64_t i) {
        float gate[kChunk], up[kChunk];
        if (vector) {
          load_chunk(x, gate_index(i, f), true, gate);
          load_chunk(x, gate_index(i, f) + f, true, up);
        } else {
          for (int e = 0; e < kChunk; ++e) gate[e] = x[gate_index(i + e, f)], up[e] = x[gate_index(i + e, f) + f];
        }
        for (int e = 0; e < kChunk; ++e) gate[e] = numeric::swiglu(gate[e], up[e]);
        store_chunk(y, i, vector, gate);
      },
      [&](std::int64_t i) { store(y, i, numeric::swiglu(x[gate_index(i, f)], x[gate_index(i, f) + f])); });
}

template <typename T>
__global__ void swiglu_backward_kernel(AnyIn x, AnyIn dy, T* dx, std::int64_t n, int f, bool vector) {
  auto element = [&](std::int64_t i) {
    const std::int64_t gate = gate_index(i, f);
    float dgate = 0.0f, dup = 0.0f;
    numeric::swiglu_derivative(x[gate], x[gate + f], dy[i], dgate, dup);
    store(dx, gate, dgate);
    store(dx, gate + f, dup);
  };
  for_chunks(
      n,
      [&](std::int64_t i) {
        if (!vector) {
          for (int e = 0; e < kChunk; ++e) element(i + e);
          return;
        }
        const std::int64_t gate = gate_index(i, f);
        float vg[kChunk], vu[kChunk], vdy[kChunk];
        load_chunk(x, gate, true, vg);
        load_chunk(x, gate + f, true, vu);
        load_chunk(dy, i, true, vdy);
        for (int e = 0; e < kChunk; ++e) {
          float dgate = 0.0f, dup = 0.0f;
          numeric::swiglu_derivative(vg[e], vu[e], vdy[e], dgate, dup);
          vg[e] = dgate, vu[e] = dup;
        }
        store_chunk(dx, gate, true, vg);
        store_chunk(dx, gate + f, true, vu);
      },
      element);
}

// One thread per pair (j, j + head_dim / 2) of a row: both are read before either is
// written, so y may alias x.
template <typename T>
__global__ void rope_kernel(AnyIn x, T* y, std::int64_t pairs, int seq, int head_dim, int first_position,
                            float log_theta, float direction) {
  const int half = head_dim / 2;
  for (std::int64_t i = first_index(); i < pairs; i += grid_stride()) {
    const std::int64_t row = i / half;
    const int j = int(i % half);
    const int position = first_position + int(row % seq);
    const float angle = direction * numeric::rope_angle(position, j, head_dim, log_theta);
    const std::int64_t at = row * head_dim + j;
    const float first = x[at], second = x[at + half];
    float out_first = 0.0f, out_second = 0.0f;
    numeric::rope_rotate(first, second, ::cosf(angle), ::sinf(angle), out_first, out_second);
    store(y, at, out_first);
    store(y, at + half, out_second);
  }
}

}  // namespace

void CudaBackend::gelu_forward(Stream s, CRef x, Ref y, std::int64_t n) {
  require_float_type(x.type, "gelu_forward");
  with_float_type(y.type, "gelu_forward", [&](auto tag) {
    using T = decltype(tag);
    launch_chunks(native(s), n, "gelu_forward", gelu_forward_kernel<T>, AnyIn(x), static_cast<T*>(y.data), n,
                  all_aligned({x.data, y.data}));
  });
}

void CudaBackend::gelu_backward(Stream s, CRef x, CRef dy, Ref dx, std::int64_t n) {
  require_float_type(x.type, "gelu_backward");
  require_float_type(dy.type, "gelu_backward");
  with_float_type(dx.type, "gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    launch_chunks(native(s), n, "gelu_backward", gelu_backward_kernel<T>, AnyIn(x), AnyIn(dy),
                  static_cast<T*>(dx.data), n, all_aligned({x.data, dy.data, dx.data}));
  });
}

void CudaBackend::swiglu_forward(Stream s, CRef x, Ref y, int rows, int f) {
  require_float_type(x.type, "swiglu_forward");
  const std::int64_t n = std::int64_t(rows) * f;
  with_float_type(y.type, "swiglu_forward", [&](auto tag) {
    using T = decltype(tag);
    launch_chunks(native(s), n, "swiglu_forward", swiglu_forward_kernel<T>, AnyIn(x), static_cast<T*>(y.data), n, f,
                  all_aligned({x.data, y.data}) && f % kChunk == 0);
  });
}

void CudaBackend::swiglu_backward(Stream s, CRef x, CRef dy, Ref dx, int rows, int f) {
  require_float_type(x.type, "swiglu_backward");
  require_float_type(dy.type, "swiglu_backward");
  const std::int64_t n = std::int64_t(rows) * f;
  with_float_type(dx.type, "swiglu_backward", [&](auto tag) {
    using T = decltype(tag);
    launch_chunks(native(s), n, "swiglu_backward", swiglu_backward_kernel<T>, AnyIn(x), AnyIn(dy),
                  static_cast<T*>(dx.data), n, f, all_aligned({x.data, dy.data, dx.data}) && f % kChunk == 0);
  });
}

namespace {
void launch_rope(cudaStream_t stream, const char* op, CRef x, Ref y, int batch, int seq, int head_dim,
                 int first_position, float theta, float direction) {
  require_float_type(x.type, op);
  const std::int64_t pairs = std::int64_t(batch) * seq * (head_dim / 2);
  with_float_type(y.type, op, [&](auto tag) {
    using T = decltype(tag);
    launch_elements(stream, pairs, op, rope_kernel<T>, AnyIn(x), static_cast<T*>(y.data), pairs, seq, head_dim,
                    first_position, std::log(theta), direction);
  });
}
}  // namespace

void CudaBackend::rope_forward(Stream s, CRef x, Ref y, int batch, int seq, int head_dim, int first_position,
                               float theta) {
  launch_rope(native(s), "rope_forward", x, y, batch, seq, head_dim, first_position, theta, 1.0f);
}

void CudaBackend::rope_backward(Stream s, CRef dy, Ref dx, int batch, int seq, int head_dim, int first_position,
                                float theta) {
  launch_rope(native(s), "rope_backward", dy, dx, batch, seq, head_dim, first_position, theta, -1.0f);
}

}  // namespace tessel::kernels::cuda
