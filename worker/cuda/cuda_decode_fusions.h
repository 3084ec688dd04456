#ifndef PAGODA_WORKER_CUDA_CUDA_DECODE_FUSIONS_H_
#define PAGODA_WORKER_CUDA_CUDA_DECODE_FUSIONS_H_

// The decode-step fusions of issue 49 that no GPU has run yet, each a switch
// of the CUDA backend (CudaBackend::set_decode_fusions) and of the CUDA
// runner (CudaRunnerOptions::decode_fusions). All off by default: a kernel
// that has never run must not be able to break the verified serving path.
// The GPU session that sees scripts/gpu_check.sh pass their tests (the
// RopeCacheWrite and FusedAddRmsNormIntoSeparateOut kernel cases, the
// GemmNoSplitK cases, worker_cuda_model_runner_test's fused-vs-plain greedy
// tokens) turns them on by changing the defaults below (kernels/ops/NOTES.md).

namespace pagoda::worker {

struct CudaDecodeFusions {
  // Backend::RopeAndWriteKvCache as one kernel (kernels/ops/rope_cache_write.h)
  // instead of the rotary kernel and then the cache write.
  bool rope_cache_write = false;
  // AddRmsNorm normalises into its output directly (the fused kernel's
  // separate-output form) instead of copying its input there first.
  bool add_rms_norm_out = false;
  // The CUDA-graph warm-ups choose each GEMM's cuBLASLt algorithm among
  // several candidates, preferring one without a split-K reduction where
  // they time equal (kernels::GemmContext::set_prefer_no_split_k).
  bool gemm_no_split_k = false;

  static CudaDecodeFusions All() { return {true, true, true}; }
  bool any() const { return rope_cache_write || add_rms_norm_out || gemm_no_split_k; }
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CUDA_CUDA_DECODE_FUSIONS_H_
