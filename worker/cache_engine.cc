#include "worker/cache_engine.h"

namespace pagoda::worker {

CacheEngine::CacheEngine(Backend* backend, const KvCacheShape& shape, int num_gpu_blocks,
                         int num_cpu_blocks)
    : backend_(backend),
      shape_(shape),
      num_gpu_blocks_(num_gpu_blocks),
      num_cpu_blocks_(num_cpu_blocks) {
  const size_t block_elements = shape_.elements_per_layer_block();
  // K of every layer, then V of every layer, device then host.
  for (int tensor = 0; tensor < 2 * shape_.num_layers; ++tensor) {
    buffers_.push_back(backend_->Allocate(shape_.dtype, block_elements * num_gpu_blocks_));
    device_caches_.push_back(buffers_.back()->raw());
  }
  for (int tensor = 0; tensor < 2 * shape_.num_layers; ++tensor) {
    // Swap space is touched only when the server swaps, so it is left
    // uninitialised (and, on CPU, unpaged) until then.
    buffers_.push_back(backend_->AllocateHost(shape_.dtype, block_elements * num_cpu_blocks_));
    host_caches_.push_back(buffers_.back()->raw());
  }
}

KvCacheLayer CacheEngine::layer(int layer) const {
  return KvCacheLayer{.key = device_caches_[layer],
                      .value = device_caches_[shape_.num_layers + layer],
                      .dtype = shape_.dtype,
                      .num_kv_heads = shape_.num_kv_heads,
                      .block_size = shape_.block_size,
                      .head_dim = shape_.head_dim};
}

void CacheEngine::SwapIn(absl::Span<const BlockPair> cpu_to_gpu) {
  if (cpu_to_gpu.empty()) return;
  backend_->SwapBlocks(device_caches_, host_caches_, shape_.bytes_per_layer_block(), cpu_to_gpu,
                       SwapDirection::kToDevice);
}

void CacheEngine::SwapOut(absl::Span<const BlockPair> gpu_to_cpu) {
  if (gpu_to_cpu.empty()) return;
  backend_->SwapBlocks(device_caches_, host_caches_, shape_.bytes_per_layer_block(), gpu_to_cpu,
                       SwapDirection::kToHost);
}

void CacheEngine::Copy(absl::Span<const BlockPair> gpu_to_gpu) {
  if (gpu_to_gpu.empty()) return;
  backend_->CopyBlocks(device_caches_, shape_.bytes_per_layer_block(), gpu_to_gpu);
}

void CacheEngine::ApplyBlockMoves(const FlatBatch& batch) {
  SwapOut(batch.swap_out);
  SwapIn(batch.swap_in);
  Copy(batch.copy);
}

}  // namespace pagoda::worker
