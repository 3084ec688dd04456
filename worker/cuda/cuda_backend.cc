// CudaBackend (cuda_backend.h): device set-up, buffers and copies, and the
// launches of the model's element-wise ops, linears and KV block moves; its
// attention and sampling are in cuda_backend_attention.cc and
// cuda_backend_sampling.cc.

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
#include "worker/cuda/cuda_backend_impl.h"
#include "worker/cuda/cuda_backend_kernels.h"

namespace pagoda::worker {
namespace {

using cuda_backend_internal::AlignUp;
using cuda_backend_internal::AllocateDevice;
using cuda_backend_internal::AllocatePinned;
using cuda_backend_internal::FreeDevice;
using cuda_backend_internal::FreePinned;

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

bool CudaBackend::ExpectKvCacheDType(DType dtype) {
  return dtype == DType::kFp8E4M3 || dtype == DType::kFp8E5M2 ||
         ExpectActivationDType(dtype, "the KV cache");
}

void CudaBackend::MakeCurrent() { Check(cudaSetDevice(device_), "cudaSetDevice"); }

void CudaBackend::Synchronize() { Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

void CudaBackend::set_gemm_timing(bool on) { impl_->gemm->set_timing(on); }
size_t CudaBackend::num_no_split_k_gemm_algos() const {
  return impl_->gemm->num_no_split_k_algos();
}

void CudaBackend::set_gemm_warm_up(bool open) {
  if (!fusions_.gemm_no_split_k) return;
  if (open) impl_->gemm->ForgetAlgos();
  impl_->gemm->set_prefer_no_split_k(open);
}
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
  if (fusions_.add_rms_norm_out) {
    // The kernel's separate-output form only reads its input.
    Check(
        kernels::LaunchFusedAddRmsNorm(kernels::FusedAddRmsNormParams{.input = const_cast<void*>(x),
                                                                      .residual = residual,
                                                                      .weight = weight.data,
                                                                      .num_tokens = rows,
                                                                      .hidden = hidden,
                                                                      .epsilon = eps,
                                                                      .dtype = activation_dtype_,
                                                                      .out = out},
                                       stream_),
        "fused_add_rms_norm");
    return;
  }
  // The in-place kernel works on its input: normalise a copy in `out`.
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

bool CudaBackend::RopeFitsTable(const StepBatch& batch, const RopeTable& table) {
  // The kernels read cos/sin from the table only (no fallback past it), so a
  // longer context is refused here rather than read out of bounds.
  if (batch.max_context_len <= table.max_positions) return true;
  Fail(absl::InvalidArgumentError(absl::StrCat("position ", batch.max_context_len - 1,
                                               " is past the rotary table's ", table.max_positions,
                                               " positions on CUDA (lower --max-model-len)")));
  return false;
}

void CudaBackend::Rope(void* q, void* k, int64_t token_stride, const StepBatch& batch,
                       int num_q_heads, int num_kv_heads, int head_dim, const RopeTable& table) {
  if (SkipLaunch() || !RopeFitsTable(batch, table)) return;
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
  if (SkipLaunch() || !ExpectKvCacheDType(cache.dtype)) return;
  // An FP8 cache stores E4M3(x / scale) or E5M2(x / scale) (backend.h); k
  // and v are activations.
  const kernels::KvCacheStorage storage = cuda_backend_internal::KvStorageOf(cache.dtype);
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
                                           .dtype = activation_dtype_,
                                           .storage = storage,
                                           .k_scale = cache.k_scale,
                                           .v_scale = cache.v_scale},
            stream_),
        "reshape_and_cache");
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

// A strided device-to-device copy on the stream (no kernel: the copy
// engine's 2-D memcpy, which a graph captures as a memcpy node).
void CudaBackend::CopyRows(const void* src, size_t src_stride, void* dst, size_t dst_stride,
                           size_t row_bytes, int rows) {
  if (SkipLaunch() || rows <= 0 || row_bytes == 0) return;
  Check(cudaMemcpy2DAsync(dst, dst_stride, src, src_stride, row_bytes, static_cast<size_t>(rows),
                          cudaMemcpyDeviceToDevice, stream_),
        "copy_rows");
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
