#ifndef PAGODA_WORKER_CACHE_ENGINE_H_
#define PAGODA_WORKER_CACHE_ENGINE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "worker/backend.h"

namespace pagoda::worker {

// Geometry of one worker's KV cache (its own kv heads only).
struct KvCacheShape {
  int num_layers = 0;
  int num_kv_heads = 0;
  int block_size = 0;
  int head_dim = 0;

  // Floats of one block of one layer's K (or V): num_kv_heads * block_size * head_dim.
  size_t floats_per_layer_block() const {
    return static_cast<size_t>(num_kv_heads) * block_size * head_dim;
  }
  // f32 bytes of one block over all layers, K and V.
  int64_t bytes_per_block() const {
    return 2 * static_cast<int64_t>(num_layers) * floats_per_layer_block() * sizeof(float);
  }
};

// Owns the KV blocks: per layer a K and a V tensor of layout
// [num_blocks, num_kv_heads, block_size, head_dim] in backend memory, and the
// host swap space of num_cpu_blocks blocks in the same layout. Block ids are
// the server's; this class does no bookkeeping of which block is in use.
// Thread safety: one caller at a time. The backend must outlive this object.
class CacheEngine {
 public:
  CacheEngine(Backend* backend, const KvCacheShape& shape, int num_gpu_blocks, int num_cpu_blocks);
  CacheEngine(const CacheEngine&) = delete;
  CacheEngine& operator=(const CacheEngine&) = delete;

  const KvCacheShape& shape() const { return shape_; }
  int num_gpu_blocks() const { return num_gpu_blocks_; }
  int num_cpu_blocks() const { return num_cpu_blocks_; }

  float* key_cache(int layer) { return gpu_keys_[layer]->data(); }
  float* value_cache(int layer) { return gpu_values_[layer]->data(); }
  float* cpu_key_cache(int layer) { return cpu_keys_[layer].get(); }
  float* cpu_value_cache(int layer) { return cpu_values_[layer].get(); }

  // REQUIRES: every id is in range (the batch builder checks plans). Each
  // applies its pairs in order, to every layer, K and V.
  void SwapIn(absl::Span<const BlockPair> cpu_to_gpu);
  void SwapOut(absl::Span<const BlockPair> gpu_to_cpu);
  void Copy(absl::Span<const BlockPair> gpu_to_gpu);

 private:
  Backend* backend_;
  KvCacheShape shape_;
  int num_gpu_blocks_;
  int num_cpu_blocks_;
  std::vector<std::unique_ptr<Buffer>> gpu_keys_, gpu_values_;
  std::vector<std::unique_ptr<float[]>> cpu_keys_, cpu_values_;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CACHE_ENGINE_H_
