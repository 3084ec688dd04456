// CudaBackend's paged attention: decode steps through the split-K decode
// kernel (its workspace fixed while graphs are captured), anything with a
// prompt through the prefill kernel (mma.sync, or the Hopper wgmma kernel
// under PAGODA_PREFILL_KERNEL=wgmma).

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "kernels/attention/paged_attention.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/cuda/cuda_backend_impl.h"

namespace pagoda::worker {
namespace {

// What the decode and prefill kernels' params (KernelParams) both take from
// a PagedAttention call: shapes, cache (with an FP8 one's scales), block
// tables, and the query and output, of the `activation` dtype.
template <typename KernelParams>
KernelParams AttentionKernelParams(const PagedAttentionParams& params, DType activation) {
  const StepBatch& batch = *params.batch;
  const KvCacheLayer& cache = params.cache;
  KernelParams out;
  out.dtype = activation;
  out.kv_storage = cuda_backend_internal::KvStorageOf(cache.dtype);
  if (out.kv_storage != kernels::KvCacheStorage::kDType) {
    out.k_scale = cache.k_scale;
    out.v_scale = cache.v_scale;
  }
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

// The prefill kernel asked for by PAGODA_PREFILL_KERNEL: "wgmma" for the
// Hopper kernel (issue 49; off until a GPU run has passed it, then the
// default flips here), anything else or unset for mma.sync. Read once.
kernels::PrefillKernel RequestedPrefillKernel() {
  static const kernels::PrefillKernel kernel = [] {
    const char* value = std::getenv("PAGODA_PREFILL_KERNEL");
    return value != nullptr && std::string_view(value) == "wgmma"
               ? kernels::PrefillKernel::kWgmma
               : kernels::PrefillKernel::kMmaSync;
  }();
  return kernel;
}

}  // namespace

void CudaBackend::PagedAttention(const PagedAttentionParams& params) {
  if (SkipLaunch() || !ExpectKvCacheDType(params.cache.dtype)) return;
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
  Check(kernels::LaunchDecodeAttention(
            AttentionKernelParams<kernels::DecodeAttentionParams>(params, activation_dtype_), plan,
            workspace, stream_),
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
  auto prefill = AttentionKernelParams<kernels::PrefillAttentionParams>(params, activation_dtype_);
  prefill.max_query_len = params.batch->max_query_len;
  prefill.query_start = params.batch->query_start;
  // wgmma only where it runs (compute capability 9.0, a bf16/f16 cache).
  if (RequestedPrefillKernel() == kernels::PrefillKernel::kWgmma &&
      kernels::PrefillKernelRunsOnDevice(kernels::PrefillKernel::kWgmma, device_,
                                         prefill.kv_storage)) {
    prefill.kernel = kernels::PrefillKernel::kWgmma;
  }
  Check(kernels::LaunchPrefillAttention(prefill, stream_), "prefill attention");
}

}  // namespace pagoda::worker
