#ifndef PAGODA_KERNELS_OPS_ROPE_CACHE_WRITE_H_
#define PAGODA_KERNELS_OPS_ROPE_CACHE_WRITE_H_

// Rotary embedding fused with the KV-cache write: one launch where the
// decoder layer ran LaunchRotaryEmbedding (rotary_embedding.h) and then
// LaunchReshapeAndCache (cache_ops.h). Each token's thread block rotates its
// q heads in place and rotates its k heads on the way into the cache, so k
// is read once and never written back to the activations. v is copied (or
// quantized) into the cache as the plain write does.
//
// Results equal the two launches': q and the cache hold the same rounded
// values (the rotation is computed in f32 from f32 cos/sin, rounded to the
// activation dtype, then stored or quantized to FP8 E4M3 as
// LaunchReshapeAndCache does). Every rope scaling the tables support
// (rope_cache.h: default, linear, llama3) is in the cos/sin table, so the
// kernel is the same for all of them.
//
// Unlike the two launches, the key rows of the activations are NOT rotated
// afterwards (nothing reads them once they are in the cache).
//
// Off the serving path until a GPU has run kernels_ops_cache_ops_test's
// RopeCacheWrite cases: CudaBackend::DecodeFusions::rope_cache_write.

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/kv_cache_storage.h"
#include "kernels/scalar_type.h"

namespace pagoda::kernels {

struct RopeCacheWriteParams {
  const int64_t* positions = nullptr;  // [num_tokens] device. REQUIRES: in [0, max_position).
  // [num_tokens, num_heads, head_dim], token t at query + t * query_token_stride
  // elements; rotated in place.
  void* query = nullptr;
  int64_t query_token_stride = 0;
  // [num_tokens, num_kv_heads, head_dim] each, strided likewise (slices of a
  // fused QKV output). Read only.
  const void* key = nullptr;
  int64_t key_token_stride = 0;
  const void* value = nullptr;
  int64_t value_token_stride = 0;
  // Device float [max_position, rotary_dim], from BuildRopeCosSinCache.
  const float* cos_sin_cache = nullptr;
  // [num_blocks, num_kv_heads, block_size, head_dim] each, dtype or E4M3.
  void* key_cache = nullptr;
  void* value_cache = nullptr;
  // [num_tokens] device: flat slot, or -1 for a padding token (its q is still
  // rotated; nothing of it is written to the cache). REQUIRES: as
  // ReshapeAndCacheParams::slot_mapping.
  const int64_t* slot_mapping = nullptr;
  int num_tokens = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int rotary_dim = 0;  // even, <= head_dim; dims past it are copied unrotated
  int block_size = 0;
  ScalarType dtype = ScalarType::kBF16;  // of q, k, v (and a kDType cache)
  KvCacheStorage storage = KvCacheStorage::kDType;
  float k_scale = 1.0f;  // kFp8E4M3 only. REQUIRES: finite and > 0.
  float v_scale = 1.0f;
};
// cudaErrorInvalidValue for a bad shape, a null buffer or a bad FP8 scale.
cudaError_t LaunchRopeCacheWrite(const RopeCacheWriteParams& params, cudaStream_t stream);

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_OPS_ROPE_CACHE_WRITE_H_
