#ifndef PAGODA_KERNELS_OPS_CACHE_OPS_H_
#define PAGODA_KERNELS_OPS_CACHE_OPS_H_

// Kernels that write and copy KV-cache bytes (swap_blocks.h moves them
// between device and host). Layout (DESIGN.md), per layer:
// K and V each [num_blocks, num_kv_heads, block_size, head_dim], contiguous.
// All of these are exact byte copies (the element type only sets the
// width), but for the write into an FP8 cache, which quantizes.
//
// Thread safety: launchers are stateless; they enqueue work on `stream` and
// return at once. Callers own every buffer and keep it alive until the stream
// has run past the work.

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/kv_cache_storage.h"
#include "kernels/scalar_type.h"

namespace pagoda::kernels {

// Writes the K and V of this step's tokens into their cache slots, one layer.
struct ReshapeAndCacheParams {
  // [num_tokens, num_kv_heads, head_dim], row `t` at key + t * key_token_stride
  // elements (so K and V may be slices of a fused QKV output).
  const void* key = nullptr;
  const void* value = nullptr;
  int64_t key_token_stride = 0;
  int64_t value_token_stride = 0;
  void* key_cache = nullptr;    // [num_blocks, num_kv_heads, block_size, head_dim]
  void* value_cache = nullptr;  // same shape
  // [num_tokens] device int64: flat slot = block * block_size + offset, or -1
  // for a padding token that is skipped. REQUIRES: every other value is in
  // [0, num_blocks * block_size) and no slot appears twice.
  const int64_t* slot_mapping = nullptr;
  int num_tokens = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;
  ScalarType dtype = ScalarType::kBF16;  // of key and value (and a kDType cache)
  // kFp8E4M3: the cache holds one byte an element, E4M3(k / k_scale) and
  // E4M3(v / v_scale) (kernels/kv_cache_storage.h; the division in f32, as
  // the CPU worker's), for dtype f32, f16 or bf16; kFp8E5M2 the same with
  // E5M2 codes. REQUIRES: finite positive scales (the launcher rejects
  // others).
  KvCacheStorage storage = KvCacheStorage::kDType;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};
cudaError_t LaunchReshapeAndCache(const ReshapeAndCacheParams& params, cudaStream_t stream);

// Copies whole blocks inside device memory for every layer in ONE launch
// (copy-on-write of a shared last block).
struct CopyBlocksParams {
  // Device arrays of num_layers pointers, each to one layer's K (V) cache.
  void* const* key_caches = nullptr;
  void* const* value_caches = nullptr;
  // Device int64 [num_pairs, 2]: (src block, dst block). REQUIRES: ids in
  // range; no dst is also a src or a dst of another pair (the copies run in
  // parallel).
  const int64_t* block_pairs = nullptr;
  int num_layers = 0;
  int num_pairs = 0;
  // Bytes of one block of one layer's K (= V): kv_heads * block_size * head_dim * elem.
  int64_t block_bytes = 0;
};
cudaError_t LaunchCopyBlocks(const CopyBlocksParams& params, cudaStream_t stream);

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_OPS_CACHE_OPS_H_
