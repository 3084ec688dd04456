#include "worker/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/attention/paged_attention.h"
#include "kernels/ops/activation.h"
#include "kernels/ops/cache_ops.h"
#include "kernels/ops/embedding.h"
#include "kernels/ops/gemm.h"
#include "kernels/ops/logits_processing.h"
#include "kernels/ops/rms_norm.h"
#include "kernels/ops/rotary_embedding.h"
#include "kernels/ops/sampling.h"
#include "kernels/ops/swap_blocks.h"
#include "worker/cuda/cuda_backend_kernels.h"

namespace pagoda::worker {
namespace {

absl::Status CudaStatus(cudaError_t error, const char* what) {
  const std::string message =
      absl::StrCat(what, ": ", cudaGetErrorName(error), ": ", cudaGetErrorString(error));
  return error == cudaErrorInvalidValue       ? absl::InvalidArgumentError(message)
         : error == cudaErrorMemoryAllocation ? absl::ResourceExhaustedError(message)
                                              : absl::InternalError(message);
}

// The device's peak memory bandwidth for the decode planner, or 0 when the
// device does not report its memory clock or bus width (a planning hint, not
// a fault: the error is cleared and the planner plans without it).
double PeakMemoryGbpsOf(int device) {
  int clock_khz = 0;
  int bus_bits = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return kernels::PeakMemoryGbps(clock_khz, bus_bits);
}

// CUDA memory and the call that frees it: cudaFree for device memory from
// cudaMalloc, cudaFreeHost for pinned host memory from cudaHostAlloc.
class CudaBuffer final : public Buffer {
 public:
  using Free = cudaError_t (*)(void*);
  CudaBuffer(DType dtype, size_t size, void* data, Free free)
      : Buffer(dtype, size), data_(data), free_(free) {}
  ~CudaBuffer() override {
    if (data_ != nullptr) free_(data_);
  }
  void* raw() override { return data_; }
  const void* raw() const override { return data_; }

 private:
  void* data_;
  Free free_;
};

cudaError_t AllocateDevice(void** data, size_t bytes) { return cudaMalloc(data, bytes); }
cudaError_t FreeDevice(void* data) { return cudaFree(data); }
cudaError_t AllocatePinned(void** data, size_t bytes) {
  return cudaHostAlloc(data, bytes, cudaHostAllocDefault);
}
cudaError_t FreePinned(void* data) { return cudaFreeHost(data); }

// Grow-only memory from one allocator (never shrinks, so graph capture sees
// stable addresses).
template <cudaError_t (*kAllocate)(void**, size_t), cudaError_t (*kFree)(void*)>
class GrowOnly {
 public:
  GrowOnly() = default;
  GrowOnly(const GrowOnly&) = delete;
  GrowOnly& operator=(const GrowOnly&) = delete;
  ~GrowOnly() {
    if (data_ != nullptr) kFree(data_);
  }
  cudaError_t Reserve(size_t bytes) {
    if (bytes <= bytes_) return cudaSuccess;
    if (data_ != nullptr) kFree(data_);
    data_ = nullptr;
    bytes_ = 0;
    const cudaError_t error = kAllocate(&data_, bytes);
    if (error == cudaSuccess) bytes_ = bytes;
    return error;
  }
  uint8_t* get() const { return static_cast<uint8_t*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};
using Scratch = GrowOnly<AllocateDevice, FreeDevice>;        // Device memory.
using PinnedScratch = GrowOnly<AllocatePinned, FreePinned>;  // Pinned host staging.

size_t AlignUp(size_t n) { return (n + 255) & ~size_t{255}; }

// What the decode and prefill kernels' params (KernelParams) both take from
// a PagedAttention call: shapes, cache, block tables, query and output.
template <typename KernelParams>
KernelParams AttentionKernelParams(const PagedAttentionParams& params) {
  const StepBatch& batch = *params.batch;
  const KvCacheLayer& cache = params.cache;
  KernelParams out;
  out.dtype = cache.dtype;
  out.num_seqs = batch.num_seqs;
  out.num_q_heads = params.num_heads;
  out.num_kv_heads = cache.num_kv_heads;
  out.head_dim = cache.head_dim;
  out.block_size = cache.block_size;
  out.max_blocks_per_seq = batch.max_blocks_per_seq;
  out.softmax_scale = params.scale;
  out.q = params.query;
  out.q_token_stride = params.query_token_stride;
  out.k_cache = cache.key;
  out.v_cache = cache.value;
  out.block_tables = batch.block_tables;
  out.context_lens = batch.context_lens;
  out.out = params.output;
  return out;
}

// A buffer of `num_elements` of `dtype` from kAllocate (at least one byte, so
// every buffer has an address), freed by kFree; its data is null when
// kAllocate failed, and *error says why.
template <cudaError_t (*kAllocate)(void**, size_t), cudaError_t (*kFree)(void*)>
std::unique_ptr<Buffer> AllocateBuffer(DType dtype, size_t num_elements, cudaError_t* error) {
  void* data = nullptr;
  *error = kAllocate(&data, std::max<size_t>(num_elements * DTypeSize(dtype), 1));
  if (*error != cudaSuccess) data = nullptr;
  return std::make_unique<CudaBuffer>(dtype, num_elements, data, kFree);
}

}  // namespace

struct CudaBackend::Impl {
  std::unique_ptr<kernels::GemmContext> gemm;
  Scratch decode_workspace;  // Eager split-K decode; may grow.
  // Split-K decode inside graphs: sized once by ReserveDecodeWorkspace and
  // never grown by an eager step, so a captured graph's pointer stays valid.
  Scratch graph_decode_workspace;
  Scratch sample_out;         // Sampling results, packed (SampleLayout).
  Scratch processed_logits;   // Rows after logits processing; grows once.
  PinnedScratch sample_host;  // Their host mirror.
  Scratch block_args;         // CopyBlocks' pointer arrays and pairs.
};

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(int device,
                                                                 DType activation_dtype) {
  if (activation_dtype != DType::kBF16 && activation_dtype != DType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat("the CUDA backend computes in bf16 or f16, not ",
                                                   std::string(DTypeName(activation_dtype))));
  }
  int count = 0;
  if (cudaError_t error = cudaGetDeviceCount(&count); error != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        "no usable CUDA device: ", cudaGetErrorName(error), ": ", cudaGetErrorString(error)));
  }
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", device, " does not exist (", count, " visible)"));
  }
  if (cudaError_t error = cudaSetDevice(device); error != cudaSuccess) {
    return CudaStatus(error, "cudaSetDevice");
  }
  int num_sms = 0;
  if (cudaError_t error = cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device);
      error != cudaSuccess) {
    return CudaStatus(error, "cudaDeviceGetAttribute");
  }
  const double peak_memory_gbps = PeakMemoryGbpsOf(device);
  cudaStream_t stream = nullptr;
  if (cudaError_t error = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      error != cudaSuccess) {
    return CudaStatus(error, "cudaStreamCreate");
  }
  auto impl = std::make_unique<Impl>();
  if (cublasStatus_t status =
          kernels::GemmContext::Create(kernels::GemmContext::kDefaultWorkspaceBytes, &impl->gemm);
      status != CUBLAS_STATUS_SUCCESS) {
    cudaStreamDestroy(stream);
    return absl::InternalError(absl::StrCat("cuBLASLt context: ", cublasLtGetStatusName(status)));
  }
  return std::unique_ptr<CudaBackend>(new CudaBackend(device, activation_dtype, stream, num_sms,
                                                      peak_memory_gbps, std::move(impl)));
}

CudaBackend::CudaBackend(int device, DType activation_dtype, cudaStream_t stream, int num_sms,
                         double peak_memory_gbps, std::unique_ptr<Impl> impl)
    : device_(device),
      activation_dtype_(activation_dtype),
      stream_(stream),
      num_sms_(num_sms),
      peak_memory_gbps_(peak_memory_gbps),
      impl_(std::move(impl)) {}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(stream_);
  impl_.reset();
  cudaStreamDestroy(stream_);
}

std::string CudaBackend::DeviceDescription() const {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device_) != cudaSuccess) {
    return absl::StrCat("GPU ", device_);
  }
  return absl::StrFormat("%s (GPU %d, %d SMs, %.1f GiB)", prop.name, device_, num_sms_,
                         static_cast<double>(prop.totalGlobalMem) / (1 << 30));
}

void CudaBackend::Fail(absl::Status status) {
  if (status_.ok()) status_ = std::move(status);
}

bool CudaBackend::Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return true;
  Fail(CudaStatus(error, what));
  return false;
}

bool CudaBackend::ExpectActivationDType(DType dtype, const char* what) {
  if (dtype == activation_dtype_) return true;
  Fail(absl::InvalidArgumentError(absl::StrCat(what, " is ", std::string(DTypeName(dtype)),
                                               "; the CUDA backend serves ",
                                               std::string(DTypeName(activation_dtype_)))));
  return false;
}

void CudaBackend::MakeCurrent() { Check(cudaSetDevice(device_), "cudaSetDevice"); }

void CudaBackend::Synchronize() { Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

void CudaBackend::set_gemm_timing(bool on) { impl_->gemm->set_timing(on); }
size_t CudaBackend::num_timed_gemm_algos() const { return impl_->gemm->num_timed_algos(); }
void CudaBackend::ForgetGemmAlgos() { impl_->gemm->ForgetAlgos(); }

void CudaBackend::ReserveDecodeWorkspace(int num_seqs, int num_heads, int num_kv_heads,
                                         int head_dim, int max_context_len) {
  // Split-K is the plan that needs scratch; size for the always-split plan,
  // which bounds the automatic one.
  const kernels::DecodePlan plan = kernels::PlanDecodeAttention(
      num_seqs, num_heads, num_kv_heads, head_dim, std::max(1, max_context_len), num_sms_,
      kernels::DecodePlanOptions{.split_k = kernels::SplitKMode::kAlways});
  Check(impl_->graph_decode_workspace.Reserve(std::max<size_t>(plan.workspace_bytes, 1)),
        "graph decode workspace");
}

std::unique_ptr<Buffer> CudaBackend::Allocate(DType dtype, size_t num_elements) {
  ++num_allocations_;
  cudaError_t error = cudaSuccess;
  auto buffer = AllocateBuffer<AllocateDevice, FreeDevice>(dtype, num_elements, &error);
  Check(error, "cudaMalloc");
  return buffer;
}

std::unique_ptr<Buffer> CudaBackend::AllocateHost(DType dtype, size_t num_elements) {
  ++num_allocations_;
  cudaError_t error = cudaSuccess;
  auto buffer = AllocateBuffer<AllocatePinned, FreePinned>(dtype, num_elements, &error);
  Check(error, "cudaHostAlloc");
  return buffer;
}

void CudaBackend::UploadBytes(const void* host, void* device, size_t n) {
  CopyAndWait(device, host, n, cudaMemcpyHostToDevice, "upload");
}

void CudaBackend::DownloadBytes(const void* device, void* host, size_t n) {
  CopyAndWait(host, device, n, cudaMemcpyDeviceToHost, "download");
}

void CudaBackend::CopyAndWait(void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                              const char* what) {
  // Not part of a graph: replay refreshes the static buffers eagerly.
  if (mode_ == LaunchMode::kCapture || n == 0) return;
  // Synchronous from the caller's view: the host buffer (pinned staging
  // included) may be rewritten, or read, as soon as this returns.
  if (Check(cudaMemcpyAsync(dst, src, n, kind, stream_), what)) Synchronize();
}

void CudaBackend::Embedding(const StepBatch& batch, const Tensor& table, void* out) {
  if (SkipLaunch() || !ExpectActivationDType(table.dtype, "the embedding table")) return;
  // Ids were validated against the vocabulary by FlattenStepPlan.
  Check(kernels::LaunchEmbedding(kernels::EmbeddingParams{.token_ids = batch.token_ids,
                                                          .table = table.data,
                                                          .out = out,
                                                          .num_tokens = batch.num_tokens,
                                                          .hidden = static_cast<int>(table.dim(1)),
                                                          .vocab_size = table.dim(0),
                                                          .dtype = activation_dtype_},
                                 stream_),
        "embedding");
}

void CudaBackend::RmsNorm(const void* x, const Tensor& weight, int rows, float eps, void* out) {
  if (SkipLaunch() || !ExpectActivationDType(weight.dtype, "an RMSNorm weight")) return;
  const int hidden = static_cast<int>(weight.dim(0));
  Check(kernels::LaunchRmsNorm(kernels::RmsNormParams{.input = x,
                                                      .input_stride = hidden,
                                                      .weight = weight.data,
                                                      .out = out,
                                                      .num_tokens = rows,
                                                      .hidden = hidden,
                                                      .epsilon = eps,
                                                      .dtype = activation_dtype_},
                               stream_),
        "rms_norm");
}

void CudaBackend::AddRmsNorm(void* residual, const void* x, const Tensor& weight, int rows,
                             float eps, void* out) {
  if (SkipLaunch() || !ExpectActivationDType(weight.dtype, "an RMSNorm weight")) return;
  const int hidden = static_cast<int>(weight.dim(0));
  // The fused kernel works in place on its input: normalise into `out`.
  if (out != x && !Check(cudaMemcpyAsync(out, x, size_t{1} * rows * hidden * 2,
                                         cudaMemcpyDeviceToDevice, stream_),
                         "add_rms_norm copy")) {
    return;
  }
  Check(kernels::LaunchFusedAddRmsNorm(kernels::FusedAddRmsNormParams{.input = out,
                                                                      .residual = residual,
                                                                      .weight = weight.data,
                                                                      .num_tokens = rows,
                                                                      .hidden = hidden,
                                                                      .epsilon = eps,
                                                                      .dtype = activation_dtype_},
                                       stream_),
        "fused_add_rms_norm");
}

void CudaBackend::Linear(const void* x, int rows, const Tensor& weight, const float* bias, void* y,
                         DType y_dtype) {
  if (SkipLaunch() || rows == 0 || !ExpectActivationDType(weight.dtype, "a linear weight")) return;
  const bool f32_out = y_dtype == DType::kF32;
  if (!f32_out && !ExpectActivationDType(y_dtype, "a linear output")) return;
  // cuBLASLt's bias epilogue takes the bias in the output dtype: pass the f32
  // bias straight through for f32 output, add it after for half output.
  const cublasStatus_t status = kernels::Gemm(*impl_->gemm,
                                              kernels::GemmParams{.a = x,
                                                                  .w = weight.data,
                                                                  .bias = f32_out ? bias : nullptr,
                                                                  .c = y,
                                                                  .m = rows,
                                                                  .n = weight.dim(0),
                                                                  .k = weight.dim(1),
                                                                  .dtype = activation_dtype_,
                                                                  .out_dtype = y_dtype},
                                              stream_);
  if (status != CUBLAS_STATUS_SUCCESS) {
    Fail(absl::InternalError(absl::StrCat("GEMM [", rows, " x ", weight.dim(1), "] x [",
                                          weight.dim(0), " x ", weight.dim(1),
                                          "]^T: ", cublasLtGetStatusName(status))));
    return;
  }
  if (bias != nullptr && !f32_out) {
    Check(LaunchAddBias(y, bias, rows, static_cast<int>(weight.dim(0)), activation_dtype_, stream_),
          "bias");
  }
}

void CudaBackend::Rope(void* q, void* k, int64_t token_stride, const StepBatch& batch,
                       int num_q_heads, int num_kv_heads, int head_dim, const RopeTable& table) {
  if (SkipLaunch()) return;
  // The kernel reads cos/sin from the table only (no fallback past it), so a
  // longer context is refused here rather than read out of bounds.
  if (batch.max_context_len > table.max_positions) {
    Fail(absl::InvalidArgumentError(
        absl::StrCat("position ", batch.max_context_len - 1, " is past the rotary table's ",
                     table.max_positions, " positions on CUDA (lower --max-model-len)")));
    return;
  }
  Check(kernels::LaunchRotaryEmbedding(
            kernels::RotaryEmbeddingParams{.positions = batch.positions,
                                           .query = q,
                                           .query_token_stride = token_stride,
                                           .key = k,
                                           .key_token_stride = token_stride,
                                           .cos_sin_cache = table.cos_sin,
                                           .num_tokens = batch.num_tokens,
                                           .num_heads = num_q_heads,
                                           .num_kv_heads = num_kv_heads,
                                           .head_dim = head_dim,
                                           .rotary_dim = head_dim,
                                           .dtype = activation_dtype_},
            stream_),
        "rotary_embedding");
}

void CudaBackend::WriteKvCache(const void* k, const void* v, int64_t token_stride,
                               const StepBatch& batch, const KvCacheLayer& cache) {
  if (SkipLaunch() || !ExpectActivationDType(cache.dtype, "the KV cache")) return;
  Check(kernels::LaunchReshapeAndCache(
            kernels::ReshapeAndCacheParams{.key = k,
                                           .value = v,
                                           .key_token_stride = token_stride,
                                           .value_token_stride = token_stride,
                                           .key_cache = cache.key,
                                           .value_cache = cache.value,
                                           .slot_mapping = batch.slot_mapping,
                                           .num_tokens = batch.num_tokens,
                                           .num_kv_heads = cache.num_kv_heads,
                                           .head_dim = cache.head_dim,
                                           .block_size = cache.block_size,
                                           .dtype = cache.dtype},
            stream_),
        "reshape_and_cache");
}

void CudaBackend::PagedAttention(const PagedAttentionParams& params) {
  if (SkipLaunch() || !ExpectActivationDType(params.cache.dtype, "the KV cache")) return;
  if (params.batch->decode_only) {
    DecodeAttention(params);
  } else {
    PrefillAttention(params);
  }
}

void CudaBackend::DecodeAttention(const PagedAttentionParams& params) {
  const StepBatch& batch = *params.batch;
  const KvCacheLayer& cache = params.cache;
  const int max_context =
      mode_ == LaunchMode::kCapture ? graph_max_context_len_ : std::max(1, batch.max_context_len);
  const kernels::DecodePlan plan = kernels::PlanDecodeAttention(
      batch.num_seqs, params.num_heads, cache.num_kv_heads, cache.head_dim, max_context, num_sms_,
      kernels::DecodePlanOptions{.peak_memory_gbps = peak_memory_gbps_});
  void* workspace = nullptr;
  if (!DecodeWorkspace(plan.workspace_bytes, &workspace)) return;
  Check(
      kernels::LaunchDecodeAttention(AttentionKernelParams<kernels::DecodeAttentionParams>(params),
                                     plan, workspace, stream_),
      "decode attention");
}

bool CudaBackend::DecodeWorkspace(size_t bytes, void** workspace) {
  if (mode_ == LaunchMode::kCapture) {
    // Growing it here would free memory an earlier graph uses.
    if (bytes > impl_->graph_decode_workspace.bytes()) {
      Fail(absl::InternalError(
          "graph decode workspace too small: call ReserveDecodeWorkspace before capturing"));
      return false;
    }
    *workspace = impl_->graph_decode_workspace.get();
    return true;
  }
  if (bytes > 0 && !Check(impl_->decode_workspace.Reserve(bytes), "decode workspace")) {
    return false;
  }
  *workspace = impl_->decode_workspace.get();
  return true;
}

void CudaBackend::PrefillAttention(const PagedAttentionParams& params) {
  auto prefill = AttentionKernelParams<kernels::PrefillAttentionParams>(params);
  prefill.max_query_len = params.batch->max_query_len;
  prefill.query_start = params.batch->query_start;
  Check(kernels::LaunchPrefillAttention(prefill, stream_), "prefill attention");
}

void CudaBackend::SiluAndMul(const void* gate_up, int rows, int dim, void* out) {
  if (SkipLaunch()) return;
  Check(kernels::LaunchSiluAndMul(kernels::SiluAndMulParams{.input = gate_up,
                                                            .out = out,
                                                            .num_tokens = rows,
                                                            .intermediate = dim,
                                                            .dtype = activation_dtype_},
                                  stream_),
        "silu_and_mul");
}

void CudaBackend::GatherRows(const void* src, const StepBatch& batch, int dim, void* out) {
  if (SkipLaunch()) return;
  Check(LaunchGatherRows(src, batch.logits_indices, batch.num_logits_rows, dim, activation_dtype_,
                         out, stream_),
        "gather_rows");
}

const float* CudaBackend::ProcessLogits(const Tensor& logits, const SamplingBatch& params) {
  if (!params.has_edits) return nullptr;
  const int rows = params.num_rows;
  const int vocab = static_cast<int>(logits.dim(1));
  if (!Check(impl_->processed_logits.Reserve(sizeof(float) * rows * vocab), "processed logits")) {
    return nullptr;
  }
  auto* processed = reinterpret_cast<float*>(impl_->processed_logits.get());
  const cudaError_t launched = kernels::LaunchLogitsProcessing(
      kernels::LogitsProcessingParams{.logits = static_cast<const float*>(logits.data),
                                      .logits_stride = logits.dim(1),
                                      .num_rows = rows,
                                      .vocab_size = vocab,
                                      .penalties = params.penalties,
                                      .edit_offsets = params.edit_offsets,
                                      .edits = params.edits,
                                      .mask_offsets = params.mask_offsets,
                                      .token_masks = params.token_masks,
                                      .processed = processed},
      stream_);
  return Check(launched, "logits processing") ? processed : nullptr;
}

void CudaBackend::Sample(const Tensor& logits, const SamplingBatch& params, SampleResults* out) {
  const int rows = params.num_rows;
  const int k = params.num_logprobs;
  out->num_logprobs = k;
  out->token_ids.resize(rows);
  out->logprobs.resize(rows);
  out->top_ids.resize(size_t{1} * rows * k);
  out->top_logprobs.resize(size_t{1} * rows * k);
  if (rows == 0) return;
  if (logits.dtype != DType::kF32) {
    return Fail(absl::InvalidArgumentError("Sample needs f32 logits"));
  }
  // One packed region on the device and its pinned mirror: ids, logprobs,
  // top ids, top logprobs (4-byte elements each), so one copy brings all back.
  const size_t ids_bytes = AlignUp(size_t{4} * rows);
  const size_t top_bytes = AlignUp(size_t{4} * rows * std::max(k, 1));
  const size_t total = 2 * ids_bytes + 2 * top_bytes;
  if (!Check(impl_->sample_out.Reserve(total), "sampling scratch") ||
      !Check(impl_->sample_host.Reserve(total), "sampling staging")) {
    return;
  }
  auto* base = static_cast<uint8_t*>(impl_->sample_out.get());
  auto* ids = reinterpret_cast<int32_t*>(base);
  auto* logprobs = reinterpret_cast<float*>(base + ids_bytes);
  auto* top_ids = reinterpret_cast<int32_t*>(base + 2 * ids_bytes);
  auto* top_logprobs = reinterpret_cast<float*>(base + 2 * ids_bytes + top_bytes);
  const float* processed = ProcessLogits(logits, params);
  if (params.has_edits && processed == nullptr) return;
  const cudaError_t launched = kernels::LaunchTokenSampling(
      kernels::TokenSamplingParams{.logits = static_cast<const float*>(logits.data),
                                   .logits_stride = logits.dim(1),
                                   .num_rows = rows,
                                   .vocab_size = static_cast<int>(logits.dim(1)),
                                   .temperatures = params.temperatures,
                                   .top_k = params.top_k,
                                   .top_p = params.top_p,
                                   .seeds = params.seeds,
                                   .sample_indices = params.sample_indices,
                                   .num_logprobs = k,
                                   .sampled_ids = ids,
                                   .sampled_logprobs = logprobs,
                                   .top_ids = k > 0 ? top_ids : nullptr,
                                   .top_logprobs = k > 0 ? top_logprobs : nullptr,
                                   .sampling_logits = processed,
                                   .processed_logprobs = params.processed_logprobs,
                                   .min_p = params.min_p},
      stream_);
  if (!Check(launched, "token sampling") ||
      !Check(
          cudaMemcpyAsync(impl_->sample_host.get(), base, total, cudaMemcpyDeviceToHost, stream_),
          "sampling download")) {
    return;
  }
  Synchronize();
  const uint8_t* host = impl_->sample_host.get();
  std::memcpy(out->token_ids.data(), host, size_t{4} * rows);
  std::memcpy(out->logprobs.data(), host + ids_bytes, size_t{4} * rows);
  std::memcpy(out->top_ids.data(), host + 2 * ids_bytes, size_t{4} * rows * k);
  std::memcpy(out->top_logprobs.data(), host + 2 * ids_bytes + top_bytes, size_t{4} * rows * k);
}

void CudaBackend::CopyBlocks(absl::Span<void* const> caches, size_t block_bytes,
                             absl::Span<const BlockPair> pairs) {
  if (pairs.empty() || caches.empty()) return;
  // The kernel reads device arrays: K pointers, V pointers, then the pairs.
  const size_t pointer_bytes = AlignUp(caches.size() * sizeof(void*));
  const size_t pair_bytes = pairs.size() * sizeof(BlockPair);
  std::vector<uint8_t> host(pointer_bytes + pair_bytes);
  std::memcpy(host.data(), caches.data(), caches.size() * sizeof(void*));
  std::memcpy(host.data() + pointer_bytes, pairs.data(), pair_bytes);
  if (!Check(impl_->block_args.Reserve(host.size()), "block copy arguments")) return;
  auto* device = static_cast<uint8_t*>(impl_->block_args.get());
  // Pageable source: returns once the bytes are staged, so `host` may go.
  if (!Check(cudaMemcpyAsync(device, host.data(), host.size(), cudaMemcpyHostToDevice, stream_),
             "block copy arguments")) {
    return;
  }
  const int num_layers = static_cast<int>(caches.size() / 2);
  auto* const* pointers = reinterpret_cast<void* const*>(device);
  Check(kernels::LaunchCopyBlocks(
            kernels::CopyBlocksParams{
                .key_caches = pointers,
                .value_caches = pointers + num_layers,
                .block_pairs = reinterpret_cast<const int64_t*>(device + pointer_bytes),
                .num_layers = num_layers,
                .num_pairs = static_cast<int>(pairs.size()),
                .block_bytes = static_cast<int64_t>(block_bytes)},
            stream_),
        "copy_blocks");
}

void CudaBackend::SwapBlocks(absl::Span<void* const> device_caches,
                             absl::Span<void* const> host_caches, size_t block_bytes,
                             absl::Span<const BlockPair> pairs, SwapDirection direction) {
  if (pairs.empty() || device_caches.empty()) return;
  const bool to_host = direction == SwapDirection::kToHost;
  absl::Span<void* const> src = to_host ? device_caches : host_caches;
  absl::Span<void* const> dst = to_host ? host_caches : device_caches;
  const int num_layers = static_cast<int>(device_caches.size() / 2);
  Check(kernels::SwapBlocks(
            kernels::SwapBlocksParams{
                .src_key_caches = src.data(),
                .src_value_caches = src.data() + num_layers,
                .dst_key_caches = dst.data(),
                .dst_value_caches = dst.data() + num_layers,
                .num_layers = num_layers,
                .block_bytes = static_cast<int64_t>(block_bytes),
                .kind = to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice},
            std::span<const BlockPair>(pairs.data(), pairs.size()), stream_),
        "swap_blocks");
}

}  // namespace pagoda::worker
