#ifndef PAGODA_WORKER_CACHE_ENGINE_H_
#define PAGODA_WORKER_CACHE_ENGINE_H_

// CacheEngine: one worker's paged KV cache in backend memory (and its CPU swap
// space), sized from the blocks the server grants, with the block moves a step
// plan asks for.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "common/dtype.h"
#include "worker/backend.h"
#include "worker/flat_batch.h"

namespace pagoda::worker {

// Geometry and element type of one worker's KV cache (its own kv heads only).
struct KvCacheShape {
  int num_layers = 0;
  int num_kv_heads = 0;
  int block_size = 0;
  int head_dim = 0;
  DType dtype = DType::kF32;  // --kv-cache-dtype, resolved.

  // Elements of one block of one layer's K (or V): num_kv_heads * block_size * head_dim.
  size_t elements_per_layer_block() const {
    return static_cast<size_t>(num_kv_heads) * block_size * head_dim;
  }
  // Bytes of one block of one layer's K (or V).
  size_t bytes_per_layer_block() const { return elements_per_layer_block() * DTypeSize(dtype); }
  // Bytes of one block over all layers, K and V: what the server divides
  // memory by (LoadModelResponse.bytes_per_block), so a 2-byte cache dtype
  // gives twice the blocks of f32.
  int64_t bytes_per_block() const {
    return 2 * static_cast<int64_t>(num_layers) * static_cast<int64_t>(bytes_per_layer_block());
  }
};

// Owns the KV blocks: per layer a K and a V tensor of layout
// [num_blocks, num_kv_heads, block_size, head_dim] of shape.dtype in backend
// memory, and the host swap space of num_cpu_blocks blocks in the same layout
// (Backend::AllocateHost: pinned on CUDA). Block ids are the server's; this
// class does no bookkeeping of which block is in use. Thread safety: one
// caller at a time. The backend must outlive this object.
class CacheEngine {
 public:
  CacheEngine(Backend* backend, const KvCacheShape& shape, int num_gpu_blocks, int num_cpu_blocks);
  CacheEngine(const CacheEngine&) = delete;
  CacheEngine& operator=(const CacheEngine&) = delete;

  const KvCacheShape& shape() const { return shape_; }
  int num_gpu_blocks() const { return num_gpu_blocks_; }
  int num_cpu_blocks() const { return num_cpu_blocks_; }

  // Layer `layer`'s device K and V, as the ops take them.
  KvCacheLayer layer(int layer) const;
  // Swap space of layer `layer` (host memory), K or V.
  void* cpu_key_cache(int layer) { return host_caches_[layer]; }
  void* cpu_value_cache(int layer) { return host_caches_[shape_.num_layers + layer]; }

  // REQUIRES: every id is in range (the batch builder checks plans). Each is
  // one backend call for every layer, K and V, applying its pairs.
  void SwapIn(absl::Span<const BlockPair> cpu_to_gpu);
  void SwapOut(absl::Span<const BlockPair> gpu_to_cpu);
  void Copy(absl::Span<const BlockPair> gpu_to_gpu);

  // A step's block moves in the one safe order: swap out first, so a block
  // vacated this step can receive a swapped-in block; then swap in; copies
  // (copy-on-write) last, as they act on resident blocks.
  void ApplyBlockMoves(const FlatBatch& batch);

  // What a step plan is checked against before it touches this cache.
  BatchLimits Limits(int vocab_size, int max_positions) const {
    return BatchLimits{.vocab_size = vocab_size,
                       .block_size = shape_.block_size,
                       .num_gpu_blocks = num_gpu_blocks_,
                       .num_cpu_blocks = num_cpu_blocks_,
                       .max_positions = max_positions};
  }

 private:
  Backend* backend_;
  KvCacheShape shape_;
  int num_gpu_blocks_;
  int num_cpu_blocks_;
  std::vector<std::unique_ptr<Buffer>> buffers_;  // Device caches, then swap space.
  // K of every layer, then V of every layer: Backend::CopyBlocks' order.
  std::vector<void*> device_caches_, host_caches_;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CACHE_ENGINE_H_
