// The CUDA backend's matrix products: cuBLASLt with its fused epilogues, cpu_linear.cpp's gemm
// being the reference. Row-major operands reach column-major cuBLASLt by the transpose
// identity (its A is our B); algorithms are cached per problem key and restricted to reduction
// scheme NONE, so no split-K sums vary by run. The epilogue mapping, fp8 requirements and the
// fallback kernels are explained in docs/GPU.md, "Matrix products".
#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <mutex>

#include "cuda_backend_impl.hpp"
#include "tessel/core/error.hpp"
#include "tessel/kernels/numeric.hpp"

namespace tessel::kernels::cuda {

namespace {

constexpr std::size_t kLtWorkspaceBytes = std::size_t(32) << 20;
constexpr int kThreads = 256;

// ---- element access in the stored type (the CPU backend's rounding, numeric.hpp) ----

__device__ __forceinline__ float load_element(const void* base, DType type, std::int64_t i) {
  switch (type) {
    case DType::bf16:
      return numeric::from_bf16(static_cast<const std::uint16_t*>(base)[i]);
    case DType::f16:
      return numeric::from_f16(static_cast<const std::uint16_t*>(base)[i]);
    case DType::f8_e4m3:
      return numeric::from_f8_e4m3(static_cast<const std::uint8_t*>(base)[i]);
    default:
      return static_cast<const float*>(base)[i];
  }
}
__device__ __forceinline__ void store_element(void* base, DType type, std::int64_t i, float value) {
  switch (type) {
    case DType::bf16:
      static_cast<std::uint16_t*>(base)[i] = numeric::to_bf16(value);
      break;
    case DType::f16:
      static_cast<std::uint16_t*>(base)[i] = numeric::to_f16(value);
      break;
    case DType::f8_e4m3:
      static_cast<std::uint8_t*>(base)[i] = numeric::to_f8_e4m3(value);
      break;
    default:
      static_cast<float*>(base)[i] = value;
      break;
  }
}

// ---- fallback epilogues and the bias-gradient accumulation ----

// aux = c + bias (kept for the backward), c = gelu(aux), GELU taken of the unrounded sum.
__global__ void bias_gelu_kernel(void* c, DType c_type, const void* bias, DType bias_type, void* aux, DType aux_type,
                                 int m, int n) {
  const std::int64_t total = std::int64_t(m) * n;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const float pre = load_element(c, c_type, i) + load_element(bias, bias_type, i % n);
    store_element(aux, aux_type, i, pre);
    store_element(c, c_type, i, numeric::gelu(pre));
  }
}

// c *= gelu'(aux) and bias_gradient[j] += the column sums of the new c (before it is
// rounded to c's type, as the CPU sums its fp32 result), rows in index order.
__global__ void dgelu_column_sums_kernel(void* c, DType c_type, const void* aux, DType aux_type, int m, int n,
                                         float* bias_gradient) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  float sum = 0.0f;
  for (int r = 0; r < m; ++r) {
    const std::int64_t i = std::int64_t(r) * n + j;
    const float value = load_element(c, c_type, i) * numeric::gelu_derivative(load_element(aux, aux_type, i));
    store_element(c, c_type, i, value);
    sum += value;
  }
  bias_gradient[j] += sum;
}

unsigned elementwise_blocks(std::int64_t n) {
  return unsigned(std::clamp<std::int64_t>((n + kThreads - 1) / kThreads, 1, 4096));
}
unsigned column_blocks(int n) { return unsigned((n + kThreads - 1) / kThreads); }

// ---- cuBLASLt ----

cudaDataType_t lt_type(DType type) {
  switch (type) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    case DType::f8_e4m3:
      return CUDA_R_8F_E4M3;
    default:
      throw Error("backend cuda gemm: element type " + std::string(to_string(type)) +
                  " is not f32, bf16, f16 or f8_e4m3");
  }
}

// The alignment cuBLASLt may assume of a pointer (it picks kernels by it), at most 16.
std::int64_t alignment_bytes(const void* pointer) {
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  std::int64_t alignment = 16;
  while (alignment > 1 && address % std::uintptr_t(alignment) != 0) alignment /= 2;
  return alignment;
}

// One product as cuBLASLt sees it (after the transpose identity), with its epilogue.
struct LtProduct {
  bool transpose_a = false, transpose_b = false;  // ours, row-major
  bool tf32 = false;                              // fp32 inputs on TF32 tensor cores
  int m = 0, n = 0, k = 0, batch = 1;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  float alpha = 1.0f, beta = 0.0f;
  CRef a, b;
  Ref c;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // bias input, or the bias-gradient output
  DType bias_type = DType::f32;
  void* aux = nullptr;
  DType aux_type = DType::f32;
};

// The plan cache: a product's key -> the algorithm, or that cuBLASLt has none for it.
using PlanKey = std::array<std::int64_t, 22>;
struct Plan {
  bool supported = false;
  cublasLtMatmulAlgo_t algo{};
};
std::mutex plan_mutex;
std::map<PlanKey, Plan> plans;

PlanKey plan_key(int device, const LtProduct& p) {
  return {device,
          p.transpose_a,
          p.transpose_b,
          p.tf32,
          p.m,
          p.n,
          p.k,
          p.batch,
          p.stride_a,
          p.stride_b,
          p.stride_c,
          std::int64_t(p.a.type),
          std::int64_t(p.c.type),
          std::int64_t(p.epilogue),
          std::int64_t(p.bias_type),
          std::int64_t(p.aux_type),
          p.beta != 0.0f,
          alignment_bytes(p.a.data),
          alignment_bytes(p.b.data),
          alignment_bytes(p.c.data),
          alignment_bytes(p.bias),
          alignment_bytes(p.aux)};
}

// Owners of cuBLASLt's descriptors, destroyed when the call returns.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  LtDescriptors() = default;
  LtDescriptors(const LtDescriptors&) = delete;
  LtDescriptors& operator=(const LtDescriptors&) = delete;
  ~LtDescriptors() {
    if (preference) cublasLtMatmulPreferenceDestroy(preference);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

template <typename T>
void set_op(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  check(cublasLtMatmulDescSetAttribute(op, attribute, &value, sizeof value), "cublasLtMatmulDescSetAttribute");
}

// A column-major layout of rows x cols (ld = rows), batched when batch > 1.
cublasLtMatrixLayout_t make_layout(DType type, std::int64_t rows, std::int64_t cols, int batch, std::int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  check(cublasLtMatrixLayoutCreate(&layout, lt_type(type), std::uint64_t(rows), std::uint64_t(cols), rows),
        "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    const std::int32_t count = batch;
    check(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
          "cublasLtMatrixLayoutSetAttribute");
    check(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
          "cublasLtMatrixLayoutSetAttribute");
  }
  return layout;
}

void describe(const LtProduct& p, LtDescriptors& d) {
  const cublasComputeType_t compute = p.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  check(cublasLtMatmulDescCreate(&d.op, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
  // cuBLASLt's A is our B: stored [k x n] row-major = column-major n x k, or [n x k]
  // row-major (transposed) = column-major k x n taken transposed. Its B is our A alike.
  const cublasOperation_t op_lt_a = p.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_lt_b = p.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_op(d.op, CUBLASLT_MATMUL_DESC_TRANSA, op_lt_a);
  set_op(d.op, CUBLASLT_MATMUL_DESC_TRANSB, op_lt_b);
  d.a = make_layout(p.b.type, p.transpose_b ? p.k : p.n, p.transpose_b ? p.n : p.k, p.batch, p.stride_b);
  d.b = make_layout(p.a.type, p.transpose_a ? p.m : p.k, p.transpose_a ? p.k : p.m, p.batch, p.stride_a);
  d.c = make_layout(p.c.type, p.n, p.m, p.batch, p.stride_c);
  if (p.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    set_op(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, p.epilogue);
    set_op(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
    // The bias (gradient) type defaults to D's; name it only where it differs.
    if (p.bias_type != p.c.type) set_op(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, std::int32_t(lt_type(p.bias_type)));
  }
  if (p.aux != nullptr) {
    set_op(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux);
    set_op(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, std::int64_t(p.n));
    if (p.aux_type != p.c.type)
      set_op(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, std::int32_t(lt_type(p.aux_type)));
  }
}

template <typename T>
void set_preference(cublasLtMatmulPreference_t preference, cublasLtMatmulPreferenceAttributes_t attribute,
                    const T& value) {
  check(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof value),
        "cublasLtMatmulPreferenceSetAttribute");
}

// The cached plan for `p`, asking the heuristic the first time.
Plan find_plan(CudaBackend& backend, const LtProduct& p, LtDescriptors& d) {
  const PlanKey key = plan_key(backend.device(), p);
  {
    std::lock_guard lock(plan_mutex);
    if (const auto found = plans.find(key); found != plans.end()) return found->second;
  }
  check(cublasLtMatmulPreferenceCreate(&d.preference), "cublasLtMatmulPreferenceCreate");
  set_preference(d.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, std::uint64_t(kLtWorkspaceBytes));
  // No split-K reductions: each output element is summed by one kernel in one order.
  set_preference(d.preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                 std::uint32_t(CUBLASLT_REDUCTION_SCHEME_NONE));
  set_preference(d.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, std::uint32_t(alignment_bytes(p.b.data)));
  set_preference(d.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, std::uint32_t(alignment_bytes(p.a.data)));
  set_preference(d.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, std::uint32_t(alignment_bytes(p.c.data)));
  set_preference(d.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, std::uint32_t(alignment_bytes(p.c.data)));
  cublasLtMatmulHeuristicResult_t result{};
  int found_count = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(backend.lt(), d.op, d.a, d.b, d.c, d.c, d.preference, 1, &result, &found_count);
  Plan plan;
  plan.supported = status == CUBLAS_STATUS_SUCCESS && found_count > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (plan.supported) plan.algo = result.algo;
  else if (p.epilogue == CUBLASLT_EPILOGUE_DEFAULT && status != CUBLAS_STATUS_NOT_SUPPORTED &&
           status != CUBLAS_STATUS_SUCCESS)
    check(status, "cublasLtMatmulAlgoGetHeuristic");
  std::lock_guard lock(plan_mutex);
  plans.emplace(key, plan);
  return plan;
}

void mark_unsupported(int device, const LtProduct& p) {
  std::lock_guard lock(plan_mutex);
  plans[plan_key(device, p)].supported = false;
}

// Runs `p` through cuBLASLt; false (nothing enqueued) when cuBLASLt has no algorithm
// for its epilogue, so that the caller applies the epilogue itself.
bool run_lt(CudaBackend& backend, Stream s, const LtProduct& p, void* lt_workspace) {
  LtDescriptors d;
  describe(p, d);
  const Plan plan = find_plan(backend, p, d);
  if (!plan.supported) {
    if (p.epilogue == CUBLASLT_EPILOGUE_DEFAULT)
      throw Error("backend cuda gemm: cuBLASLt has no algorithm for this product (" + std::to_string(p.m) + " x " +
                  std::to_string(p.n) + " x " + std::to_string(p.k) + ", " + std::string(to_string(p.a.type)) + ")");
    return false;
  }
  const cublasStatus_t status =
      cublasLtMatmul(backend.lt(), d.op, &p.alpha, p.b.data, d.a, p.a.data, d.b, &p.beta, p.c.data, d.c, p.c.data, d.c,
                     &plan.algo, lt_workspace, kLtWorkspaceBytes, backend.native(s));
  // An epilogue/type combination cuBLASLt refuses only at launch (see the AUX and BIAS
  // data type attributes) is remembered and done by hand from then on.
  if (p.epilogue != CUBLASLT_EPILOGUE_DEFAULT &&
      (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE)) {
    mark_unsupported(backend.device(), p);
    return false;
  }
  check(status, "cublasLtMatmul");
  return true;
}

LtProduct plain_product(const Gemm& g) {
  LtProduct p;
  p.transpose_a = g.transpose_a, p.transpose_b = g.transpose_b;
  p.tf32 = g.tf32 && g.a.type == DType::f32;  // other input types are TF32 values already
  p.m = g.m, p.n = g.n, p.k = g.k;
  p.alpha = g.alpha, p.beta = g.beta;
  p.a = g.a, p.b = g.b, p.c = g.c;
  return p;
}

// What cuBLASLt's fp8 kernels require (see the file comment), checked before any call.
void check_fp8_operands(int device, const Gemm& g) {
  if (!cuda_device_has_fp8(device))
    throw Error("backend cuda gemm: f8_e4m3 inputs need compute capability 8.9 or later; device " +
                std::to_string(device) + " has no fp8 tensor cores");
  if (g.transpose_a || !g.transpose_b)
    throw Error("backend cuda gemm: f8_e4m3 inputs need cuBLASLt's TN form: transpose_b and not transpose_a "
                "(y = x W^T with W stored [n x k])");
  if (g.k % 16 != 0)
    throw Error("backend cuda gemm: f8_e4m3 inputs need k a multiple of 16 (16-byte rows), not " +
                std::to_string(g.k));
  if (g.c.type != DType::f32 && g.c.type != DType::bf16)
    throw Error("backend cuda gemm: f8_e4m3 inputs write C in f32 or bf16, not " + std::string(to_string(g.c.type)));
}

void check_operands(int device, const Gemm& g) {
  TESSEL_ASSERT(g.m >= 0 && g.n >= 0 && g.k >= 0, "GEMM shapes are not negative");
  if (g.a.type != g.b.type)
    throw Error("backend cuda gemm: A is " + std::string(to_string(g.a.type)) + " but B is " +
                std::string(to_string(g.b.type)) + "; both operands take one element type");
  if (g.a.type == DType::f8_e4m3) {
    check_fp8_operands(device, g);
    return;
  }
  if (g.c.type != DType::f32 && g.c.type != g.a.type)
    throw Error("backend cuda gemm: C is " + std::string(to_string(g.c.type)) + "; it must be f32 or the inputs' " +
                std::string(to_string(g.a.type)));
  lt_type(g.a.type);
}

}  // namespace

void CudaBackend::gemm(Stream s, const Gemm& g) {
  check_operands(device(), g);
  if (g.m == 0 || g.n == 0) return;
  const cudaStream_t stream = native(s);
  // One scratch: cuBLASLt's workspace, then n floats for a bias gradient.
  char* scratch = static_cast<char*>(workspace(s, kLtWorkspaceBytes + std::size_t(g.n) * sizeof(float)));
  void* lt_workspace = scratch;
  float* bias_gradient_scratch = reinterpret_cast<float*>(scratch + kLtWorkspaceBytes);
  LtProduct p = plain_product(g);
  // k = 0 is an empty sum, C = beta C, which cuBLASLt does not promise: a kernel scales C
  // and the epilogue runs by hand.
  const auto fused = [&](const LtProduct& product) { return g.k > 0 && run_lt(*this, s, product, lt_workspace); };
  const auto plain = [&] {
    if (g.k > 0) run_lt(*this, s, plain_product(g), lt_workspace);
    else if (g.beta == 0.0f) fill(s, g.c, std::int64_t(g.m) * g.n, 0.0f);  // whatever C held
    else scale(s, g.c, std::int64_t(g.m) * g.n, g.beta);
  };
  switch (g.epilogue) {
    case Epilogue::none:
      plain();
      break;
    case Epilogue::bias: {
      TESSEL_ASSERT(g.bias.data != nullptr, "the bias epilogue needs a bias");
      p.epilogue = CUBLASLT_EPILOGUE_BIAS, p.bias = g.bias.data, p.bias_type = g.bias.type;
      if (fused(p)) return;
      plain();
      add_bias(s, g.c, g.bias, g.m, g.n);
      break;
    }
    case Epilogue::bias_gelu: {
      TESSEL_ASSERT(g.bias.data != nullptr && g.aux.data != nullptr, "the bias-GELU epilogue needs a bias and aux");
      p.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS, p.bias = g.bias.data, p.bias_type = g.bias.type;
      p.aux = g.aux.data, p.aux_type = g.aux.type;
      if (fused(p)) return;
      plain();
      bias_gelu_kernel<<<elementwise_blocks(std::int64_t(g.m) * g.n), kThreads, 0, stream>>>(
          g.c.data, g.c.type, g.bias.data, g.bias.type, g.aux.data, g.aux.type, g.m, g.n);
      break;
    }
    case Epilogue::bias_gradient: {
      TESSEL_ASSERT(g.bias_gradient != nullptr, "the bias-gradient epilogue needs its output");
      TESSEL_ASSERT(!g.transpose_b, "the bias-gradient epilogue sums the rows of a plain B (dY)");
      // dY (our B) is cuBLASLt's A, n x k column-major: its sums over k are BGRADA.
      p.epilogue = CUBLASLT_EPILOGUE_BGRADA, p.bias = bias_gradient_scratch, p.bias_type = DType::f32;
      if (fused(p)) {
        add(s, f32(g.bias_gradient), f32(g.bias_gradient), f32(bias_gradient_scratch), g.n);
        break;
      }
      plain();
      bias_gradient(s, g.b, g.bias_gradient, g.k, g.n);
      break;
    }
    case Epilogue::dgelu_bias_gradient: {
      TESSEL_ASSERT(g.beta == 0.0f, "the dgelu epilogue overwrites C");
      TESSEL_ASSERT(g.bias_gradient != nullptr && g.aux.data != nullptr, "the dgelu epilogue needs aux and its output");
      p.epilogue = CUBLASLT_EPILOGUE_DGELU_BGRAD, p.bias = bias_gradient_scratch, p.bias_type = DType::f32;
      p.aux = g.aux.data, p.aux_type = g.aux.type;
      if (fused(p)) {
        add(s, f32(g.bias_gradient), f32(g.bias_gradient), f32(bias_gradient_scratch), g.n);
        break;
      }
      plain();
      dgelu_column_sums_kernel<<<column_blocks(g.n), kThreads, 0, stream>>>(g.c.data, g.c.type, g.aux.data, g.aux.type,
                                                                            g.m, g.n, g.bias_gradient);
      break;
    }
  }
  check(cudaGetLastError(), "gemm epilogue kernel launch");
}

void CudaBackend::gemm_batched(Stream s, const BatchedGemm& g) {
  TESSEL_ASSERT(g.gemm.epilogue == Epilogue::none, "batched GEMMs take no epilogue");
  TESSEL_ASSERT(g.batch >= 0, "a batch count is not negative");
  check_operands(device(), g.gemm);
  if (g.batch == 0 || g.gemm.m == 0 || g.gemm.n == 0) return;
  if (g.gemm.k == 0) {  // empty sums: each C scaled on its own
    for (int i = 0; i < g.batch; ++i) {
      Gemm one = g.gemm;
      one.c = offset(g.gemm.c, i * g.stride_c);
      gemm(s, one);
    }
    return;
  }
  LtProduct p = plain_product(g.gemm);
  p.batch = g.batch;
  p.stride_a = g.stride_a, p.stride_b = g.stride_b, p.stride_c = g.stride_c;
  run_lt(*this, s, p, workspace(s, kLtWorkspaceBytes));
}

}  // namespace tessel::kernels::cuda
