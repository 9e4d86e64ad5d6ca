// The tensor layouts' factories and what their implementation files share.
#pragma once

#include <fmt/format.h>

#include "tessel/executor/tensor_layout.hpp"

namespace tessel::executor {

std::unique_ptr<TensorLayout> make_megatron_layout(LayoutContext context);
std::unique_ptr<TensorLayout> make_summa_layout(LayoutContext context);
std::unique_ptr<TensorLayout> make_cube_layout(LayoutContext context);

// A GEMM on buffers' views: C = alpha op(A) op(B) + beta C.
inline kernels::Gemm gemm(bool transpose_a, bool transpose_b, int m, int n, int k, CRef a, CRef b, float beta, Ref c) {
  kernels::Gemm g;
  g.transpose_a = transpose_a, g.transpose_b = transpose_b;
  g.m = m, g.n = n, g.k = k;
  g.a = a, g.b = b, g.c = c;
  g.beta = beta;
  return g;
}

}  // namespace tessel::executor
