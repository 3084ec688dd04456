#ifndef PAGODA_WORKER_CUDA_CUDA_BACKEND_H_
#define PAGODA_WORKER_CUDA_CUDA_BACKEND_H_

// The CUDA backend: the Backend ops (worker/backend.h) on one GPU, one
// stream, through the kernels of kernels/ops and kernels/attention and
// cuBLASLt. Activations, weights and the KV cache are all of the serving
// dtype (bf16 or f16, worker/cuda/cuda_support.h), accumulating in f32;
// logits are f32. Built only when nvcc is found.
//
// Errors: the Backend ops return nothing, so the first failure (a bad launch,
// an out-of-memory allocation, a weight of the wrong dtype) is kept as a
// sticky status that the model runner reads after each load or step with
// status(); later ops still run but their results are not to be trusted.
//
// CUDA graphs: launch_mode() lets the model runner capture a whole forward
// pass once and replay it (worker/cuda/cuda_graph_runner.h):
// - kEager: every op is enqueued on the stream (the default);
// - kCapture: the stream is being captured; host<->device copies are
//   skipped (they are not part of the graph) and decode attention is
//   planned for graph_max_context_len() instead of the step's contexts;
// - kReplay: only UploadBytes runs (it refreshes the step metadata in the
//   graph's static buffers); every other op is skipped, because the graph
//   about to be launched does exactly that work at the same addresses.
//
// Thread safety: one caller at a time (the model runner serialises steps).

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/ops/int_linear.h"
#include "worker/backend.h"
#include "worker/cuda/cuda_decode_fusions.h"

namespace pagoda::worker {

class CudaBackend final : public Backend {
 public:
  enum class LaunchMode { kEager, kCapture, kReplay };

  // Makes `device` current for the calling thread, creates the stream and
  // the cuBLASLt context. INVALID_ARGUMENT for a device index out of range or
  // an activation dtype other than bf16/f16; INTERNAL for CUDA failures.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(int device, DType activation_dtype);
  ~CudaBackend() override;

  // The first error since creation (OK if none).
  absl::Status status() const override { return status_; }
  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }
  int num_sms() const { return num_sms_; }
  // "NVIDIA H100 80GB HBM3 (GPU 0, 132 SMs, 79.1 GiB)".
  std::string DeviceDescription() const;
  // Waits for every op enqueued so far; records a failure in status().
  void Synchronize();
  // Makes this backend's device current for the calling thread (the current
  // device is per thread, and gRPC may call the runner from any thread).
  void MakeCurrent();

  LaunchMode launch_mode() const { return mode_; }
  void set_launch_mode(LaunchMode mode) { mode_ = mode; }
  // The context length decode attention is planned for while capturing (a
  // graph's plan must hold for every step it replays). REQUIRES: >= 1.
  int graph_max_context_len() const { return graph_max_context_len_; }
  void set_graph_max_context_len(int tokens) { graph_max_context_len_ = tokens; }
  // Sizes the split-K decode workspace that captured graphs use (separate
  // from the eager one, which grows on demand) for a decode of up to
  // `num_seqs` sequences of up to `max_context_len` tokens. Call before
  // capturing; capture never allocates, and a plan that does not fit fails.
  void ReserveDecodeWorkspace(int num_seqs, int num_heads, int num_kv_heads, int head_dim,
                              int max_context_len);
  // While on, each GEMM problem met for the first time gets the fastest of
  // cuBLASLt's candidate algorithms by timing (kernels::GemmContext): the
  // graph runner's warm-up forwards. ForgetGemmAlgos drops every pick, so
  // the next call of each problem chooses again (benchmarks compare).
  void set_gemm_timing(bool on);
  size_t num_timed_gemm_algos() const;
  void ForgetGemmAlgos();
  // The decode-step fusions (cuda_decode_fusions.h; all off by default).
  void set_decode_fusions(const CudaDecodeFusions& fusions) { fusions_ = fusions; }
  const CudaDecodeFusions& decode_fusions() const { return fusions_; }
  // Opened around CudaGraphRunner's warm-up forwards: with
  // decode_fusions().gemm_no_split_k, every GEMM pick is dropped on opening
  // and each problem met in the window is chosen preferring an algorithm
  // without a split-K reduction (GemmContext::set_prefer_no_split_k), so the
  // graphs capture those picks. Nothing otherwise.
  void set_gemm_warm_up(bool open);
  size_t num_no_split_k_gemm_algos() const;

  // The device weights of an FP8 W8A8 linear (worker/cuda/cuda_fp8_linear.h).
  struct Fp8Weights {
    const uint8_t* codes = nullptr;  // [out, in] E4M3
    const float* scales = nullptr;   // [out]: s_w per output row
    const float* bias = nullptr;     // [out], or null
    int64_t out = 0;
    int64_t in = 0;
    bool static_input = false;  // the checkpoint's input_scale, else per token
    float input_scale = 1.0f;
  };
  // y[rows, out] (activation dtype) of x[rows, in] (activation dtype): each
  // row quantized to E4M3, cuBLASLt's FP8 GEMM in f32, then scaled
  // (kernels/ops/fp8_linear.h, the CPU worker's rule). Runs in row chunks
  // that fit the FP8 scratch, which ReserveFp8Scratch sizes once.
  void Fp8Linear(const Fp8Weights& weights, const void* x, int rows, void* y);
  // Allocates the FP8 linears' scratch (kFp8ScratchBytes) if not yet done:
  // at load, never while capturing, so graphs keep its address.
  void ReserveFp8Scratch();
  static constexpr size_t kFp8ScratchBytes = size_t{64} << 20;
  // The device weights of a weight-only int4/int8 linear
  // (worker/cuda/cuda_int_linear.h): kernels/ops/int_linear.h's layout.
  struct IntWeights {
    kernels::PackedIntWeight packed;
    const float* bias = nullptr;  // [out], or null
    // W8A8 (int8 inputs per token): s_w per output row, the packed scales
    // all 1; null for weight-only.
    const float* w8a8_scales = nullptr;
  };
  // y[rows, out] of x[rows, in] (activation dtype). Weight-only: up to
  // kernels::kIntGemvMaxRows rows through the GEMV (act-order inputs
  // gathered first), more through the weight dequantized into the int
  // scratch and the dense GEMM. W8A8: rows quantized to int8 codes in
  // chunks of kW8A8ChunkRows, the GEMM of codes and q - zero in f32, then
  // scaled by s_x * s_w (kernels/ops/int_linear.h). ReserveIntScratch sizes
  // the scratch (IntScratchBytes).
  static constexpr int64_t kW8A8ChunkRows = 256;
  static size_t IntScratchBytes(int64_t out, int64_t in, DType dtype, bool w8a8);
  void IntLinear(const IntWeights& weights, const void* x, int rows, void* y);
  // Grows the int linears' scratch to `bytes` (the largest dequantized
  // weight): at load, never while capturing, so graphs keep its address.
  void ReserveIntScratch(size_t bytes);
  // FP8 E4M3 weights with per-token or static FP8 inputs become a
  // CudaFp8Linear, integer codes (weight-only or int8 W8A8) a
  // CudaIntLinear.
  absl::StatusOr<std::unique_ptr<worker::Linear>> CreateQuantizedLinear(
      QuantizedWeight weight) override;

  DType activation_dtype() const override { return activation_dtype_; }
  DType default_kv_cache_dtype() const override { return activation_dtype_; }
  std::unique_ptr<Buffer> Allocate(DType dtype, size_t num_elements) override;
  std::unique_ptr<Buffer> AllocateHost(DType dtype, size_t num_elements) override;
  uint64_t num_allocations() const override { return num_allocations_; }
  void UploadBytes(const void* host, void* device, size_t n) override;
  void DownloadBytes(const void* device, void* host, size_t n) override;

  void Embedding(const StepBatch& batch, const Tensor& table, void* out) override;
  void RmsNorm(const void* x, const Tensor& weight, int rows, float eps, void* out) override;
  void AddRmsNorm(void* residual, const void* x, const Tensor& weight, int rows, float eps,
                  void* out) override;
  void Linear(const void* x, int rows, const Tensor& weight, const float* bias, void* y,
              DType y_dtype) override;
  void Rope(void* q, void* k, int64_t token_stride, const StepBatch& batch, int num_q_heads,
            int num_kv_heads, int head_dim, const RopeTable& table) override;
  void WriteKvCache(const void* k, const void* v, int64_t token_stride, const StepBatch& batch,
                    const KvCacheLayer& cache) override;
  // One kernel (kernels/ops/rope_cache_write.h) with
  // decode_fusions().rope_cache_write, else Rope then WriteKvCache.
  void RopeAndWriteKvCache(void* q, void* k, const void* v, int64_t token_stride,
                           const StepBatch& batch, int num_q_heads, int head_dim,
                           const RopeTable& table, const KvCacheLayer& cache) override;
  void PagedAttention(const PagedAttentionParams& params) override;
  void SiluAndMul(const void* gate_up, int rows, int dim, void* out) override;
  void GatherRows(const void* src, const StepBatch& batch, int dim, void* out) override;
  void CopyRows(const void* src, size_t src_stride, void* dst, size_t dst_stride, size_t row_bytes,
                int rows) override;
  void Sample(const Tensor& logits, const SamplingBatch& params, SampleResults* out) override;
  void CopyBlocks(absl::Span<void* const> caches, size_t block_bytes,
                  absl::Span<const BlockPair> pairs) override;
  void SwapBlocks(absl::Span<void* const> device_caches, absl::Span<void* const> host_caches,
                  size_t block_bytes, absl::Span<const BlockPair> pairs,
                  SwapDirection direction) override;

 private:
  struct Impl;  // cuBLASLt context and the grow-only scratch buffers.
  CudaBackend(int device, DType activation_dtype, cudaStream_t stream, int num_sms,
              double peak_memory_gbps, std::unique_ptr<Impl> impl);
  // The processed rows of `logits` (kernels/ops/logits_processing.h) in
  // grow-only scratch, enqueued; null when no row has edits or on failure
  // (then recorded, see Fail).
  const float* ProcessLogits(const Tensor& logits, const SamplingBatch& params);

  // Keeps the first failure; returns ok.
  bool Check(cudaError_t error, const char* what);
  void Fail(absl::Status status);
  // True when ops that launch kernels must be skipped (kReplay) or have
  // already failed on a mismatched dtype.
  bool SkipLaunch() const { return mode_ == LaunchMode::kReplay; }
  bool ExpectActivationDType(DType dtype, const char* what);
  // The same for a KV cache, which may also be FP8 E4M3 or E5M2 (the
  // kernels widen its codes); others fail.
  bool ExpectKvCacheDType(DType dtype);
  // Whether every position of `batch` is inside the rotary table (the
  // kernels read cos/sin from it only); fails the backend when not.
  bool RopeFitsTable(const StepBatch& batch, const RopeTable& table);
  // Copies `n` bytes on the stream and waits for them; skipped while
  // capturing (host copies are not part of a graph).
  void CopyAndWait(void* dst, const void* src, size_t n, cudaMemcpyKind kind, const char* what);
  // IntLinear's W8A8 half.
  void W8A8IntLinear(const IntWeights& weights, const void* x, int rows, void* y);
  // One chunk of W8A8IntLinear's int8 tensor-core path (up to
  // kW8A8ChunkRows rows); CUBLAS_STATUS_NOT_SUPPORTED, y untouched (only
  // the scratch's codes may be written), where cuBLASLt declines it.
  cublasStatus_t W8A8Int8Chunk(const IntWeights& weights, const void* x, int64_t count, void* y);
  void W8A8GemmFailed(cublasStatus_t status);
  // PagedAttention of a decode-only step, and of any other step.
  void DecodeAttention(const PagedAttentionParams& params);
  void PrefillAttention(const PagedAttentionParams& params);
  // Split-K scratch of at least `bytes` for one decode launch: the graph
  // workspace while capturing (never grown there), else the eager one, grown
  // on demand. False, with the failure kept, when it cannot be had.
  bool DecodeWorkspace(size_t bytes, void** workspace);

  int device_;
  DType activation_dtype_;
  cudaStream_t stream_;
  int num_sms_;
  double peak_memory_gbps_;  // 0 when the device does not say (decode attention's planner)
  std::unique_ptr<Impl> impl_;
  absl::Status status_;
  uint64_t num_allocations_ = 0;
  LaunchMode mode_ = LaunchMode::kEager;
  int graph_max_context_len_ = 1;
  CudaDecodeFusions fusions_;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CUDA_CUDA_BACKEND_H_
