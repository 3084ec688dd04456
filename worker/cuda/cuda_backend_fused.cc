// CudaBackend's fused decode-step ops (cuda_decode_fusions.h): the rotary
// embedding and KV-cache write in one kernel. Off by default; the plain ops
// are in cuda_backend.cc.

#include "kernels/ops/rope_cache_write.h"
#include "worker/cuda/cuda_backend.h"

namespace pagoda::worker {

void CudaBackend::RopeAndWriteKvCache(void* q, void* k, const void* v, int64_t token_stride,
                                      const StepBatch& batch, int num_q_heads, int head_dim,
                                      const RopeTable& table, const KvCacheLayer& cache) {
  // The fused kernel writes bf16/f16/f32 and E4M3 caches; an E5M2 one takes
  // the two plain launches.
  if (!fusions_.rope_cache_write || head_dim != cache.head_dim ||
      cache.dtype == DType::kFp8E5M2) {
    Backend::RopeAndWriteKvCache(q, k, v, token_stride, batch, num_q_heads, head_dim, table, cache);
    return;
  }
  if (SkipLaunch() || !ExpectKvCacheDType(cache.dtype) || !RopeFitsTable(batch, table)) return;
  // An FP8 cache stores E4M3(x / scale) (backend.h); k and v are activations.
  const bool fp8 = cache.dtype == DType::kFp8E4M3;
  Check(kernels::LaunchRopeCacheWrite(
            kernels::RopeCacheWriteParams{.positions = batch.positions,
                                          .query = q,
                                          .query_token_stride = token_stride,
                                          .key = k,
                                          .key_token_stride = token_stride,
                                          .value = v,
                                          .value_token_stride = token_stride,
                                          .cos_sin_cache = table.cos_sin,
                                          .key_cache = cache.key,
                                          .value_cache = cache.value,
                                          .slot_mapping = batch.slot_mapping,
                                          .num_tokens = batch.num_tokens,
                                          .num_heads = num_q_heads,
                                          .num_kv_heads = cache.num_kv_heads,
                                          .head_dim = head_dim,
                                          .rotary_dim = head_dim,
                                          .block_size = cache.block_size,
                                          .dtype = activation_dtype_,
                                          .storage = fp8 ? kernels::KvCacheStorage::kFp8E4M3
                                                         : kernels::KvCacheStorage::kDType,
                                          .k_scale = cache.k_scale,
                                          .v_scale = cache.v_scale},
            stream_),
        "rope_cache_write");
}

}  // namespace pagoda::worker
