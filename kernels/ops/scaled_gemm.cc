// cuBLASLt's int8 and scaled-FP8 GEMMs (kernels/ops/scaled_gemm.h).
//
// Layouts as gemm.cc's: cuBLASLt is column-major, so row-major C[m, n] is
// its C^T [n, m] = W^T' * A^T, our W [n, k] read as its A (k x n, ld k,
// transposed: OP_T) and our activations as its B (k x m, ld k, OP_N): the
// "TN" form both the IMMA and the FP8 kernels insist on. Its M is our n
// (weight rows: the A scale vector) and its N our m (tokens: the B scale
// vector).
//
// The descriptors are built per call (a few host microseconds; these
// products run on the quantized paths only); the algorithm the heuristic
// picks is kept in the context's cache under dtype codes no float GEMM
// uses, so repeated shapes (every decode step, graph capture) skip the
// heuristic query.

#include "kernels/ops/scaled_gemm.h"

namespace pagoda::kernels {
namespace {

// AlgoKey dtype codes of these products (gemm.cc's keys use ScalarType
// values, all >= 0).
constexpr int kInt8AlgoCode = -1;
constexpr int kFp8ScaledAlgoCode = -2;

#define PAGODA_SCALED_GEMM_RETURN_IF_ERROR(expr)          \
  do {                                                    \
    const cublasStatus_t status_ = (expr);                \
    if (status_ != CUBLAS_STATUS_SUCCESS) return status_; \
  } while (0)

// One call's descriptors, destroyed on every return path.
struct ScaledGemmDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t w = nullptr, a = nullptr, c = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;

  ScaledGemmDescriptors() = default;
  ScaledGemmDescriptors(const ScaledGemmDescriptors&) = delete;
  ScaledGemmDescriptors& operator=(const ScaledGemmDescriptors&) = delete;
  ~ScaledGemmDescriptors() {
    if (preference) cublasLtMatmulPreferenceDestroy(preference);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (w) cublasLtMatrixLayoutDestroy(w);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// Largest power of two up to 256 dividing the address.
uint32_t ScaledGemmAlignment(const void* pointer) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(pointer);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

bool ScaledGemmShapeOk(int64_t m, int64_t n, int64_t k, const void* a, const void* w,
                       const void* c) {
  return m % kScaledGemmMultiple == 0 && n % kScaledGemmMultiple == 0 &&
         k % kScaledGemmMultiple == 0 && ScaledGemmAlignment(a) >= 16 &&
         ScaledGemmAlignment(w) >= 16 && ScaledGemmAlignment(c) >= 16;
}

template <typename T>
cublasStatus_t SetScaledGemmAttribute(cublasLtMatmulDesc_t op,
                                      cublasLtMatmulDescAttributes_t attribute, const T& value) {
  return cublasLtMatmulDescSetAttribute(op, attribute, &value, sizeof(value));
}

// The TN operation with `compute`/`scale` types and the three layouts.
cublasStatus_t DescribeScaledGemm(cublasComputeType_t compute, cudaDataType_t scale_type,
                                  cudaDataType_t in_type, cudaDataType_t out_type, int64_t m,
                                  int64_t n, int64_t k, ScaledGemmDescriptors* d) {
  PAGODA_SCALED_GEMM_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&d->op, compute, scale_type));
  PAGODA_SCALED_GEMM_RETURN_IF_ERROR(
      SetScaledGemmAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T));
  PAGODA_SCALED_GEMM_RETURN_IF_ERROR(
      SetScaledGemmAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N));
  PAGODA_SCALED_GEMM_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&d->w, in_type, k, n, k));
  PAGODA_SCALED_GEMM_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&d->a, in_type, k, m, k));
  PAGODA_SCALED_GEMM_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&d->c, out_type, n, m, n));
  return CUBLAS_STATUS_SUCCESS;
}

// The cached algorithm for `key`, or the heuristic's first pick (then
// cached); NOT_SUPPORTED when it has none (also remembered).
cublasStatus_t ScaledGemmAlgo(GemmContext& context, const GemmContext::AlgoKey& key,
                              const uint32_t (&alignments)[3], ScaledGemmDescriptors* d,
                              const cublasLtMatmulAlgo_t** algo) {
  *algo = context.FindAlgo(key);
  if (*algo != nullptr) return CUBLAS_STATUS_SUCCESS;
  if (context.Declined(key)) return CUBLAS_STATUS_NOT_SUPPORTED;
  PAGODA_SCALED_GEMM_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&d->preference));
  const uint64_t workspace_bytes = context.workspace_bytes();
  PAGODA_SCALED_GEMM_RETURN_IF_ERROR(
      cublasLtMatmulPreferenceSetAttribute(d->preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &workspace_bytes, sizeof(workspace_bytes)));
  const cublasLtMatmulPreferenceAttributes_t attributes[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  const uint32_t values[4] = {alignments[0], alignments[1], alignments[2], alignments[2]};
  for (int i = 0; i < 4; ++i) {
    PAGODA_SCALED_GEMM_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
        d->preference, attributes[i], &values[i], sizeof(values[i])));
  }
  cublasLtMatmulHeuristicResult_t result = {};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      context.handle(), d->op, d->w, d->a, d->c, d->c, d->preference, 1, &result, &found);
  if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
    context.RememberDeclined(key);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  context.RememberAlgo(key, result.algo);
  *algo = context.FindAlgo(key);
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t Int8Gemm(GemmContext& context, const Int8GemmParams& p, cudaStream_t stream) {
  if (p.a == nullptr || p.w == nullptr || p.c == nullptr || p.m <= 0 || p.n <= 0 || p.k <= 0) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (!ScaledGemmShapeOk(p.m, p.n, p.k, p.a, p.w, p.c)) return CUBLAS_STATUS_NOT_SUPPORTED;
  ScaledGemmDescriptors d;
  PAGODA_SCALED_GEMM_RETURN_IF_ERROR(
      DescribeScaledGemm(CUBLAS_COMPUTE_32I, CUDA_R_32I, CUDA_R_8I, CUDA_R_32I, p.m, p.n, p.k, &d));
  const uint32_t alignments[3] = {ScaledGemmAlignment(p.w), ScaledGemmAlignment(p.a),
                                  ScaledGemmAlignment(p.c)};
  const GemmContext::AlgoKey key{p.m,   p.n,           p.k,           kInt8AlgoCode, kInt8AlgoCode,
                                 false, alignments[0], alignments[1], alignments[2]};
  const cublasLtMatmulAlgo_t* algo = nullptr;
  PAGODA_SCALED_GEMM_RETURN_IF_ERROR(ScaledGemmAlgo(context, key, alignments, &d, &algo));
  const int32_t alpha = 1, beta = 0;
  return cublasLtMatmul(context.handle(), d.op, &alpha, p.w, d.w, p.a, d.a, &beta, p.c, d.c, p.c,
                        d.c, algo, context.workspace(), context.workspace_bytes(), stream);
}

cublasStatus_t Fp8ScaledGemm(GemmContext& context, const Fp8ScaledGemmParams& p,
                             cudaStream_t stream) {
  if (p.a == nullptr || p.w == nullptr || p.c == nullptr || p.row_scales == nullptr ||
      p.col_scales == nullptr || p.m <= 0 || p.n <= 0 || p.k <= 0 ||
      (p.out_dtype != ScalarType::kBF16 && p.out_dtype != ScalarType::kF16)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (!ScaledGemmShapeOk(p.m, p.n, p.k, p.a, p.w, p.c)) return CUBLAS_STATUS_NOT_SUPPORTED;
  const cudaDataType_t out_type = p.out_dtype == ScalarType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
  ScaledGemmDescriptors d;
  PAGODA_SCALED_GEMM_RETURN_IF_ERROR(DescribeScaledGemm(
      CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_8F_E4M3, out_type, p.m, p.n, p.k, &d));
  // Its A is our weight (one scale a weight row: its M), its B our tokens.
  const int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  PAGODA_SCALED_GEMM_RETURN_IF_ERROR(
      SetScaledGemmAttribute(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, outer));
  PAGODA_SCALED_GEMM_RETURN_IF_ERROR(
      SetScaledGemmAttribute(d.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, outer));
  PAGODA_SCALED_GEMM_RETURN_IF_ERROR(
      SetScaledGemmAttribute(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, p.col_scales));
  PAGODA_SCALED_GEMM_RETURN_IF_ERROR(
      SetScaledGemmAttribute(d.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, p.row_scales));
  const uint32_t alignments[3] = {ScaledGemmAlignment(p.w), ScaledGemmAlignment(p.a),
                                  ScaledGemmAlignment(p.c)};
  const GemmContext::AlgoKey key{
      p.m,   p.n,           p.k,           kFp8ScaledAlgoCode, static_cast<int>(p.out_dtype),
      false, alignments[0], alignments[1], alignments[2]};
  const cublasLtMatmulAlgo_t* algo = nullptr;
  PAGODA_SCALED_GEMM_RETURN_IF_ERROR(ScaledGemmAlgo(context, key, alignments, &d, &algo));
  const float alpha = 1.0f, beta = 0.0f;
  return cublasLtMatmul(context.handle(), d.op, &alpha, p.w, d.w, p.a, d.a, &beta, p.c, d.c, p.c,
                        d.c, algo, context.workspace(), context.workspace_bytes(), stream);
}

}  // namespace pagoda::kernels
