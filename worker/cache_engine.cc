#include "worker/cache_engine.h"

namespace pagoda::worker {

CacheEngine::CacheEngine(Backend* backend, const KvCacheShape& shape, int num_gpu_blocks,
                         int num_cpu_blocks)
    : backend_(backend),
      shape_(shape),
      num_gpu_blocks_(num_gpu_blocks),
      num_cpu_blocks_(num_cpu_blocks) {
  const size_t block_floats = shape_.floats_per_layer_block();
  for (int layer = 0; layer < shape_.num_layers; ++layer) {
    gpu_keys_.push_back(backend_->Allocate(block_floats * num_gpu_blocks_));
    gpu_values_.push_back(backend_->Allocate(block_floats * num_gpu_blocks_));
    // Swap space is touched only when the server swaps, so it is left
    // uninitialised (and unpaged) until then.
    cpu_keys_.emplace_back(new float[block_floats * num_cpu_blocks_]);
    cpu_values_.emplace_back(new float[block_floats * num_cpu_blocks_]);
  }
}

void CacheEngine::SwapIn(absl::Span<const BlockPair> cpu_to_gpu) {
  if (cpu_to_gpu.empty()) return;
  const size_t block_floats = shape_.floats_per_layer_block();
  for (int layer = 0; layer < shape_.num_layers; ++layer) {
    backend_->SwapBlocks(key_cache(layer), cpu_key_cache(layer), block_floats, cpu_to_gpu,
                         /*to_host=*/false);
    backend_->SwapBlocks(value_cache(layer), cpu_value_cache(layer), block_floats, cpu_to_gpu,
                         /*to_host=*/false);
  }
}

void CacheEngine::SwapOut(absl::Span<const BlockPair> gpu_to_cpu) {
  if (gpu_to_cpu.empty()) return;
  const size_t block_floats = shape_.floats_per_layer_block();
  for (int layer = 0; layer < shape_.num_layers; ++layer) {
    backend_->SwapBlocks(key_cache(layer), cpu_key_cache(layer), block_floats, gpu_to_cpu,
                         /*to_host=*/true);
    backend_->SwapBlocks(value_cache(layer), cpu_value_cache(layer), block_floats, gpu_to_cpu,
                         /*to_host=*/true);
  }
}

void CacheEngine::Copy(absl::Span<const BlockPair> gpu_to_gpu) {
  if (gpu_to_gpu.empty()) return;
  const size_t block_floats = shape_.floats_per_layer_block();
  for (int layer = 0; layer < shape_.num_layers; ++layer) {
    backend_->CopyBlocks(key_cache(layer), block_floats, gpu_to_gpu);
    backend_->CopyBlocks(value_cache(layer), block_floats, gpu_to_gpu);
  }
}

}  // namespace pagoda::worker
