#include "kernels/ops/gemm.h"

#include <algorithm>
#include <vector>

namespace pagoda::kernels {

// cuBLASLt's operation and matrix layouts of one problem family (n, k,
// dtypes, bias): built once, then each call sets its row count (the columns
// of the activation and output layouts) and its bias pointer on them.
struct GemmDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t w = nullptr, a = nullptr, c = nullptr;

  GemmDescriptors() = default;
  GemmDescriptors(const GemmDescriptors&) = delete;
  GemmDescriptors& operator=(const GemmDescriptors&) = delete;
  ~GemmDescriptors() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (w) cublasLtMatrixLayoutDestroy(w);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

namespace {

cudaDataType_t ToCudaType(ScalarType type) {
  switch (type) {
    case ScalarType::kF32:
      return CUDA_R_32F;
    case ScalarType::kF16:
      return CUDA_R_16F;
    case ScalarType::kBF16:
      return CUDA_R_16BF;
    // FP8 E4M3 codes: the FP8 linears' weights and quantized inputs (E5M2
    // is a KV cache type only, named for completeness).
    case ScalarType::kFp8E4M3:
      return CUDA_R_8F_E4M3;
    case ScalarType::kFp8E5M2:
      return CUDA_R_8F_E5M2;
  }
  return CUDA_R_32F;
}

// Destroys the preference on every return path.
struct Preference {
  cublasLtMatmulPreference_t handle = nullptr;

  Preference() = default;
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  ~Preference() {
    if (handle) cublasLtMatmulPreferenceDestroy(handle);
  }
};

// Largest power of two (at most 256, cuBLASLt's default assumption) that
// divides the address: what the algorithm may rely on for that buffer.
uint32_t PointerAlignment(const void* pointer) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(pointer);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

#define PAGODA_RETURN_IF_CUBLAS_ERROR(expr)               \
  do {                                                    \
    const cublasStatus_t status_ = (expr);                \
    if (status_ != CUBLAS_STATUS_SUCCESS) return status_; \
  } while (0)

}  // namespace

cublasStatus_t GemmContext::Create(size_t workspace_bytes, std::unique_ptr<GemmContext>* out) {
  cublasLtHandle_t handle = nullptr;
  PAGODA_RETURN_IF_CUBLAS_ERROR(cublasLtCreate(&handle));
  void* workspace = nullptr;
  if (workspace_bytes > 0 && cudaMalloc(&workspace, workspace_bytes) != cudaSuccess) {
    cublasLtDestroy(handle);
    return CUBLAS_STATUS_ALLOC_FAILED;
  }
  out->reset(new GemmContext(handle, workspace, workspace_bytes));
  return CUBLAS_STATUS_SUCCESS;
}

GemmContext::GemmContext(cublasLtHandle_t handle, void* workspace, size_t workspace_bytes)
    : handle_(handle), workspace_(workspace), workspace_bytes_(workspace_bytes) {}

GemmContext::~GemmContext() {
  descriptors_.clear();  // Before the handle they were made with.
  if (workspace_ != nullptr) cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

GemmDescriptors* GemmContext::FindDescriptors(const FamilyKey& key) const {
  const auto it = descriptors_.find(key);
  return it == descriptors_.end() ? nullptr : it->second.get();
}

GemmDescriptors* GemmContext::RememberDescriptors(const FamilyKey& key,
                                                  std::unique_ptr<GemmDescriptors> descriptors) {
  return (descriptors_[key] = std::move(descriptors)).get();
}

namespace {

// The operation and matrix layouts of `p`'s family into `d`. cuBLASLt is
// column-major. Row-major C[m, n] is column-major C^T [n, m], and C^T =
// W * A^T where row-major W[n, k] read column-major is W^T (k x n, so
// transposed back with OP_T) and row-major A[m, k] is A^T (k x m).
cublasStatus_t DescribeFamily(const GemmParams& p, GemmDescriptors* d) {
  const cudaDataType_t in_type = ToCudaType(p.dtype);
  const cudaDataType_t out_type = ToCudaType(p.out_dtype);
  PAGODA_RETURN_IF_CUBLAS_ERROR(cublasLtMatmulDescCreate(&d->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T, no_transpose = CUBLAS_OP_N;
  PAGODA_RETURN_IF_CUBLAS_ERROR(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA,
                                                               &transpose, sizeof(transpose)));
  PAGODA_RETURN_IF_CUBLAS_ERROR(cublasLtMatmulDescSetAttribute(
      d->op, CUBLASLT_MATMUL_DESC_TRANSB, &no_transpose, sizeof(no_transpose)));
  if (p.bias != nullptr) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;  // bias[row of C^T] = bias[n]
    PAGODA_RETURN_IF_CUBLAS_ERROR(cublasLtMatmulDescSetAttribute(
        d->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    const int32_t bias_type = out_type;
    PAGODA_RETURN_IF_CUBLAS_ERROR(cublasLtMatmulDescSetAttribute(
        d->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
  }
  PAGODA_RETURN_IF_CUBLAS_ERROR(cublasLtMatrixLayoutCreate(&d->w, in_type, p.k, p.n, p.k));
  PAGODA_RETURN_IF_CUBLAS_ERROR(cublasLtMatrixLayoutCreate(&d->a, in_type, p.k, p.m, p.k));
  PAGODA_RETURN_IF_CUBLAS_ERROR(cublasLtMatrixLayoutCreate(&d->c, out_type, p.n, p.m, p.n));
  return CUBLAS_STATUS_SUCCESS;
}

// What differs between calls of one family: the row count and the bias.
cublasStatus_t SetCallAttributes(const GemmParams& p, GemmDescriptors* d) {
  const uint64_t rows = static_cast<uint64_t>(p.m);
  PAGODA_RETURN_IF_CUBLAS_ERROR(
      cublasLtMatrixLayoutSetAttribute(d->a, CUBLASLT_MATRIX_LAYOUT_COLS, &rows, sizeof(rows)));
  PAGODA_RETURN_IF_CUBLAS_ERROR(
      cublasLtMatrixLayoutSetAttribute(d->c, CUBLASLT_MATRIX_LAYOUT_COLS, &rows, sizeof(rows)));
  if (p.bias != nullptr) {
    PAGODA_RETURN_IF_CUBLAS_ERROR(cublasLtMatmulDescSetAttribute(
        d->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof(p.bias)));
  }
  return CUBLAS_STATUS_SUCCESS;
}

// The family's cached descriptors, made on first use, set for this call.
cublasStatus_t DescriptorsFor(GemmContext& context, const GemmParams& p, GemmDescriptors** out) {
  const GemmContext::FamilyKey key{p.n, p.k, static_cast<int>(p.dtype),
                                   static_cast<int>(p.out_dtype), p.bias != nullptr};
  GemmDescriptors* d = context.FindDescriptors(key);
  if (d == nullptr) {
    auto made = std::make_unique<GemmDescriptors>();
    PAGODA_RETURN_IF_CUBLAS_ERROR(DescribeFamily(p, made.get()));
    d = context.RememberDescriptors(key, std::move(made));
  }
  *out = d;
  return SetCallAttributes(p, d);
}

// The buffers' alignments (W, A, C, D): cuBLASLt assumes 256-byte-aligned
// buffers unless told otherwise, and slices (row offsets) may be less
// aligned. Its A is our W, its B our activations.
void Alignments(const GemmParams& p, uint32_t (&alignments)[4]) {
  alignments[0] = PointerAlignment(p.w);
  alignments[1] = PointerAlignment(p.a);
  alignments[2] = PointerAlignment(p.c);
  alignments[3] = PointerAlignment(p.c);
}

// The algorithm preferences for a problem: the context's workspace and the
// buffers' alignments.
cublasStatus_t PreferGemm(const GemmContext& context, const uint32_t (&alignments)[4],
                          Preference* preference) {
  PAGODA_RETURN_IF_CUBLAS_ERROR(cublasLtMatmulPreferenceCreate(&preference->handle));
  const uint64_t workspace_bytes = context.workspace_bytes();
  PAGODA_RETURN_IF_CUBLAS_ERROR(cublasLtMatmulPreferenceSetAttribute(
      preference->handle, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
      sizeof(workspace_bytes)));
  const cublasLtMatmulPreferenceAttributes_t alignment_attributes[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i) {
    PAGODA_RETURN_IF_CUBLAS_ERROR(cublasLtMatmulPreferenceSetAttribute(
        preference->handle, alignment_attributes[i], &alignments[i], sizeof(alignments[i])));
  }
  return CUBLAS_STATUS_SUCCESS;
}

bool Capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &status) != cudaSuccess ||
         status != cudaStreamCaptureStatusNone;
}

// Milliseconds of kTimedRuns runs of `algo` on `stream` after one warm-up,
// or a negative value when it fails (the candidate is then passed over).
float TimeAlgo(GemmContext& context, const GemmParams& p, const GemmDescriptors& d,
               const cublasLtMatmulAlgo_t& algo, cudaStream_t stream, cudaEvent_t start,
               cudaEvent_t stop) {
  const float alpha = 1.0f, beta = 0.0f;
  auto run = [&] {
    return cublasLtMatmul(context.handle(), d.op, &alpha, p.w, d.w, p.a, d.a, &beta, p.c, d.c, p.c,
                          d.c, &algo, context.workspace(), context.workspace_bytes(), stream);
  };
  if (run() != CUBLAS_STATUS_SUCCESS || cudaEventRecord(start, stream) != cudaSuccess) return -1;
  for (int i = 0; i < GemmContext::kTimedRuns; ++i) {
    if (run() != CUBLAS_STATUS_SUCCESS) return -1;
  }
  float ms = -1;
  if (cudaEventRecord(stop, stream) != cudaSuccess || cudaEventSynchronize(stop) != cudaSuccess ||
      cudaEventElapsedTime(&ms, start, stop) != cudaSuccess) {
    return -1;
  }
  return ms;
}

// Whether `algo` splits K into partial products that a reduction adds up.
bool SplitsK(const cublasLtMatmulAlgo_t& algo) {
  int32_t splits = 1;
  size_t written = 0;
  return cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                              sizeof(splits), &written) == CUBLAS_STATUS_SUCCESS &&
         splits > 1;
}

// `algo` re-configured to one K split and no reduction, when cuBLASLt
// accepts that for the problem within the context's workspace. Only for
// 256-byte-aligned buffers: cublasLtMatmulAlgoCheck assumes that alignment,
// where the heuristic was told the buffers' own.
bool WithoutSplitK(const GemmContext& context, const GemmDescriptors& d,
                   const uint32_t (&alignments)[4], const cublasLtMatmulAlgo_t& algo,
                   cublasLtMatmulAlgo_t* out) {
  for (uint32_t alignment : alignments) {
    if (alignment < 256) return false;
  }
  *out = algo;
  const int32_t one = 1;
  const uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
  cublasLtMatmulHeuristicResult_t checked = {};
  return cublasLtMatmulAlgoConfigSetAttribute(out, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &one,
                                              sizeof(one)) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulAlgoConfigSetAttribute(out, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &none,
                                              sizeof(none)) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulAlgoCheck(context.handle(), d.op, d.w, d.a, d.c, d.c, out, &checked) ==
             CUBLAS_STATUS_SUCCESS &&
         checked.workspaceSize <= context.workspace_bytes();
}

// Each candidate timed on the call's own buffers and stream; when the first
// cannot be timed, none of the others is.
std::vector<GemmCandidateTiming> TimeCandidates(GemmContext& context, const GemmParams& p,
                                                const GemmDescriptors& d,
                                                const std::vector<cublasLtMatmulAlgo_t>& algos,
                                                cudaStream_t stream) {
  std::vector<GemmCandidateTiming> timings(algos.size());
  for (size_t i = 0; i < algos.size(); ++i) timings[i].split_k = SplitsK(algos[i]);
  cudaEvent_t start = nullptr, stop = nullptr;
  if (cudaEventCreate(&start) != cudaSuccess) return timings;
  if (cudaEventCreate(&stop) != cudaSuccess) {
    cudaEventDestroy(start);
    return timings;
  }
  for (size_t i = 0; i < algos.size(); ++i) {
    timings[i].ms = TimeAlgo(context, p, d, algos[i], stream, start, stop);
    if (i == 0 && timings[0].ms <= 0) break;
  }
  cudaEventDestroy(stop);
  cudaEventDestroy(start);
  return timings;
}

// The heuristic's usable results, its first pick first, and (preferring no
// split-K, when that pick splits) the pick re-configured not to.
std::vector<cublasLtMatmulAlgo_t> CandidatesOf(const GemmContext& context, const GemmDescriptors& d,
                                               const uint32_t (&alignments)[4],
                                               const cublasLtMatmulHeuristicResult_t* results,
                                               int found) {
  std::vector<cublasLtMatmulAlgo_t> candidates = {results[0].algo};
  for (int i = 1; i < found; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS) candidates.push_back(results[i].algo);
  }
  cublasLtMatmulAlgo_t unsplit;
  if (context.prefer_no_split_k() && SplitsK(results[0].algo) &&
      WithoutSplitK(context, d, alignments, results[0].algo, &unsplit)) {
    candidates.push_back(unsplit);
  }
  return candidates;
}

// The algorithm for a problem not yet in the context's cache: the
// heuristic's first, or (timing or preferring no split-K, and not
// capturing) the pick of PickGemmCandidate among its candidates.
cublasStatus_t ChooseAlgo(GemmContext& context, const GemmParams& p, const GemmDescriptors& d,
                          const uint32_t (&alignments)[4], cudaStream_t stream,
                          cublasLtMatmulAlgo_t* algo) {
  const bool timed = (context.timing() || context.prefer_no_split_k()) && !Capturing(stream);
  Preference preference;
  PAGODA_RETURN_IF_CUBLAS_ERROR(PreferGemm(context, alignments, &preference));
  cublasLtMatmulHeuristicResult_t results[GemmContext::kTimedCandidates] = {};
  int found = 0;
  PAGODA_RETURN_IF_CUBLAS_ERROR(
      cublasLtMatmulAlgoGetHeuristic(context.handle(), d.op, d.w, d.a, d.c, d.c, preference.handle,
                                     timed ? GemmContext::kTimedCandidates : 1, results, &found));
  if (found == 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  *algo = results[0].algo;
  if (!timed) return CUBLAS_STATUS_SUCCESS;
  const bool first_splits = SplitsK(results[0].algo);
  // Preferring no split-K alone has nothing to time when the pick does not split.
  if (!context.timing() && !first_splits) return CUBLAS_STATUS_SUCCESS;
  const std::vector<cublasLtMatmulAlgo_t> candidates =
      CandidatesOf(context, d, alignments, results, found);
  if (candidates.size() == 1) return CUBLAS_STATUS_SUCCESS;
  const std::vector<GemmCandidateTiming> timings =
      TimeCandidates(context, p, d, candidates, stream);
  const int pick = PickGemmCandidate(timings.data(), static_cast<int>(timings.size()),
                                     context.timing(), context.prefer_no_split_k());
  if (timings[0].ms > 0 && context.timing()) context.CountTimedAlgo();
  if (context.prefer_no_split_k() && first_splits && !timings[pick].split_k) {
    context.CountNoSplitKAlgo();
  }
  *algo = candidates[pick];
  return CUBLAS_STATUS_SUCCESS;
}

// An FP8 product as cuBLASLt runs it on sm_90: E4M3 x E4M3 "TN" (ours
// always is), f32 out with no bias (the scales and bias come after, in
// kernels/ops/fp8_linear.h), every dimension a multiple of 16 (PyTorch's
// _scaled_mm asks the same of cuBLASLt's FP8 path; callers pad the rows).
bool Fp8ProblemOk(const GemmParams& p) {
  return p.dtype == ScalarType::kFp8E4M3 && p.out_dtype == ScalarType::kF32 && p.bias == nullptr &&
         p.m % 16 == 0 && p.k % 16 == 0 && p.n % 16 == 0;
}

}  // namespace

int PickGemmCandidate(const GemmCandidateTiming* candidates, int count, bool fastest,
                      bool prefer_no_split_k) {
  if (count <= 0 || candidates[0].ms <= 0) return 0;
  int pick = 0;
  if (fastest) {
    int best = 0;
    for (int i = 1; i < count; ++i) {
      if (candidates[i].ms > 0 && candidates[i].ms < candidates[best].ms) best = i;
    }
    if (candidates[best].ms < candidates[0].ms * (1.0f - GemmContext::kMinTimedGain)) pick = best;
  }
  if (!prefer_no_split_k || !candidates[pick].split_k) return pick;
  int unsplit = -1;
  for (int i = 0; i < count; ++i) {
    if (candidates[i].ms > 0 && !candidates[i].split_k &&
        (unsplit < 0 || candidates[i].ms < candidates[unsplit].ms)) {
      unsplit = i;
    }
  }
  const bool close =
      unsplit >= 0 &&
      candidates[unsplit].ms <= candidates[pick].ms * (1.0f + GemmContext::kNoSplitKTolerance);
  return close ? unsplit : pick;
}

cublasStatus_t Gemm(GemmContext& context, const GemmParams& p, cudaStream_t stream) {
  const bool half_inputs = p.dtype == ScalarType::kBF16 || p.dtype == ScalarType::kF16;
  const bool output_ok = p.out_dtype == p.dtype || p.out_dtype == ScalarType::kF32;
  if (!(half_inputs && output_ok) && !Fp8ProblemOk(p)) return CUBLAS_STATUS_INVALID_VALUE;
  if (p.m <= 0 || p.n <= 0 || p.k <= 0 || p.a == nullptr || p.w == nullptr || p.c == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  GemmDescriptors* d = nullptr;
  PAGODA_RETURN_IF_CUBLAS_ERROR(DescriptorsFor(context, p, &d));
  uint32_t alignments[4];
  Alignments(p, alignments);
  // The pick is remembered per shape, dtypes, bias and alignment.
  const GemmContext::AlgoKey key{p.m,
                                 p.n,
                                 p.k,
                                 static_cast<int>(p.dtype),
                                 static_cast<int>(p.out_dtype),
                                 p.bias != nullptr,
                                 alignments[0],
                                 alignments[1],
                                 alignments[2]};
  const cublasLtMatmulAlgo_t* algo = context.FindAlgo(key);
  if (algo == nullptr) {
    cublasLtMatmulAlgo_t chosen;
    PAGODA_RETURN_IF_CUBLAS_ERROR(ChooseAlgo(context, p, *d, alignments, stream, &chosen));
    context.RememberAlgo(key, chosen);
    algo = context.FindAlgo(key);
  }

  const float alpha = 1.0f, beta = 0.0f;
  return cublasLtMatmul(context.handle(), d->op, &alpha, p.w, d->w, p.a, d->a, &beta, p.c, d->c,
                        p.c, d->c, algo, context.workspace(), context.workspace_bytes(), stream);
}

}  // namespace pagoda::kernels
