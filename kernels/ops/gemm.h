#ifndef PAGODA_KERNELS_OPS_GEMM_H_
#define PAGODA_KERNELS_OPS_GEMM_H_

// Linear layers through cuBLASLt: C[m, n] = A[m, k] * W[n, k]^T (+ bias[n]),
// everything row-major, W in torch.nn.Linear layout, f32 accumulation; bf16,
// f16 or FP8 E4M3 inputs.

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "kernels/scalar_type.h"

namespace pagoda::kernels {

struct GemmDescriptors;  // gemm.cc

// Owns one cuBLASLt handle and its device workspace. Not thread-safe: one
// stream's worth of GEMMs at a time (the workspace and the cached
// descriptors are shared by every call).
// Not copyable: it owns device memory.
class GemmContext {
 public:
  // 32 MiB: what cuBLASLt asks for on Hopper to reach its best kernels.
  static constexpr size_t kDefaultWorkspaceBytes = size_t{32} << 20;

  // Creates the handle and cudaMallocs the workspace on the current device.
  // Returns CUBLAS_STATUS_ALLOC_FAILED when the workspace does not fit.
  static cublasStatus_t Create(size_t workspace_bytes, std::unique_ptr<GemmContext>* out);

  ~GemmContext();
  GemmContext(const GemmContext&) = delete;
  GemmContext& operator=(const GemmContext&) = delete;

  cublasLtHandle_t handle() const { return handle_; }
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }

  // The algorithm cuBLASLt's heuristic picked for one problem, kept so that
  // a repeated shape (every decode step) skips the heuristic query, which
  // costs tens of microseconds of host time per GEMM. Key: m, n, k, input
  // and output dtype, bias or not, and the four pointer alignments the
  // heuristic was told.
  using AlgoKey =
      std::tuple<int64_t, int64_t, int64_t, int, int, bool, uint32_t, uint32_t, uint32_t>;
  const cublasLtMatmulAlgo_t* FindAlgo(const AlgoKey& key) const {
    const auto it = algos_.find(key);
    return it == algos_.end() ? nullptr : &it->second;
  }
  void RememberAlgo(const AlgoKey& key, const cublasLtMatmulAlgo_t& algo) { algos_[key] = algo; }
  size_t num_cached_algos() const { return algos_.size(); }
  // Problems the heuristic had no algorithm for (scaled_gemm.h's, whose
  // callers then fall back), so a declined shape pays the query once.
  bool Declined(const AlgoKey& key) const { return declined_.count(key) != 0; }
  void RememberDeclined(const AlgoKey& key) { declined_.insert(key); }
  void ForgetAlgos() {
    algos_.clear();
    declined_.clear();
    num_timed_algos_ = 0;
    num_no_split_k_algos_ = 0;
  }

  // The operation and layout descriptors of a problem family (n, k, input
  // and output dtype, bias or not), built on its first GEMM and kept: a GEMM
  // then only sets its row count and bias pointer on them, where building
  // five descriptors cost a few microseconds of host time per call.
  using FamilyKey = std::tuple<int64_t, int64_t, int, int, bool>;
  GemmDescriptors* FindDescriptors(const FamilyKey& key) const;
  GemmDescriptors* RememberDescriptors(const FamilyKey& key,
                                       std::unique_ptr<GemmDescriptors> descriptors);
  size_t num_cached_descriptors() const { return descriptors_.size(); }

  // Timing (off by default). While on, the first call of each problem times
  // up to kTimedCandidates of the heuristic's algorithms on the call's own
  // buffers and stream and keeps the fastest, so a split-K algorithm is
  // chosen only when it saves more than its reduction kernel costs. The
  // heuristic's first pick stays unless another is kMinTimedGain faster.
  // CudaGraphRunner::Capture can turn it on for its warm-up forwards (the
  // server does not: it gained nothing on the H100, kernels/ops/NOTES.md);
  // eager steps never time (a prompt's row count changes every step, and
  // timing synchronizes the stream). Never times while the stream is
  // capturing a graph.
  static constexpr int kTimedCandidates = 8;
  static constexpr int kTimedRuns = 5;
  static constexpr float kMinTimedGain = 0.03f;
  void set_timing(bool on) { timing_ = on; }
  bool timing() const { return timing_; }
  // Problems whose algorithm was picked by timing among several.
  size_t num_timed_algos() const { return num_timed_algos_; }
  void CountTimedAlgo() { ++num_timed_algos_; }

  // Preferring algorithms without a split-K reduction (off by default;
  // issue 49's decode step). While on, the first call of each problem (not
  // while capturing) asks the heuristic for kTimedCandidates algorithms,
  // adds its first pick re-configured to CUBLASLT_ALGO_CONFIG_SPLITK_NUM 1
  // with no reduction scheme (when cuBLASLt accepts that), times them all
  // and, when the pick would split K, keeps the fastest candidate that does
  // not if it is within kNoSplitKTolerance of the pick (PickGemmCandidate).
  // At decode's small m a split-K algorithm is a GEMM kernel plus a
  // reduction kernel: one more graph node and its dependency gap, which
  // isolated timing undercounts. CudaGraphRunner's warm-ups turn it on for
  // CudaDecodeFusions::gemm_no_split_k, so the graphs capture those picks.
  static constexpr float kNoSplitKTolerance = 0.03f;
  void set_prefer_no_split_k(bool on) { prefer_no_split_k_ = on; }
  bool prefer_no_split_k() const { return prefer_no_split_k_; }
  // Problems where a no-split-K algorithm replaced a split-K pick.
  size_t num_no_split_k_algos() const { return num_no_split_k_algos_; }
  void CountNoSplitKAlgo() { ++num_no_split_k_algos_; }

 private:
  GemmContext(cublasLtHandle_t handle, void* workspace, size_t workspace_bytes);

  cublasLtHandle_t handle_;
  void* workspace_;
  size_t workspace_bytes_;
  std::map<AlgoKey, cublasLtMatmulAlgo_t> algos_;
  std::set<AlgoKey> declined_;
  std::map<FamilyKey, std::unique_ptr<GemmDescriptors>> descriptors_;
  bool timing_ = false;
  size_t num_timed_algos_ = 0;
  bool prefer_no_split_k_ = false;
  size_t num_no_split_k_algos_ = 0;
};

// One timed cuBLASLt candidate: milliseconds (<= 0: it failed and is passed
// over) and whether it splits K into a separate reduction.
struct GemmCandidateTiming {
  float ms = -1.0f;
  bool split_k = false;
};
// Of timed candidates, candidates[0] being the heuristic's first pick, the
// index to keep (pure host logic, tested without a device):
// - fastest: the fastest when it beats the first by kMinTimedGain, else 0;
// - then, with prefer_no_split_k and that choice splitting K: the fastest
//   candidate that does not split, when within kNoSplitKTolerance of it.
// 0 when the first could not be timed.
int PickGemmCandidate(const GemmCandidateTiming* candidates, int count, bool fastest,
                      bool prefer_no_split_k);

struct GemmParams {
  const void* a = nullptr;     // [m, k] activations, dtype
  const void* w = nullptr;     // [n, k] weights, dtype
  const void* bias = nullptr;  // [n] in out_dtype, optional
  void* c = nullptr;           // [m, n], out_dtype; overwritten (no accumulate)
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  // Of a and w: kBF16 or kF16; or kFp8E4M3 (codes; f32 accumulation with
  // the tensor cores' periodic promotion, no fast accumulation), which
  // REQUIRES out_dtype kF32, no bias, m, k and n multiples of 16 (pad the
  // rows: kernels/ops/fp8_linear.h).
  ScalarType dtype = ScalarType::kBF16;
  ScalarType out_dtype = ScalarType::kBF16;  // dtype, or kF32 (e.g. logits)
};

// Enqueues the product on `stream`. CUBLAS_STATUS_INVALID_VALUE for a bad
// shape or an unsupported dtype pair; CUBLAS_STATUS_NOT_SUPPORTED when
// cuBLASLt has no algorithm for it.
cublasStatus_t Gemm(GemmContext& context, const GemmParams& params, cudaStream_t stream);

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_OPS_GEMM_H_
