#include "kernels/ops/swap_blocks.h"

#include <vector>

namespace pagoda::kernels {

cudaError_t SwapBlocks(const SwapBlocksParams& p, std::span<const BlockPair> pairs,
                       cudaStream_t stream, int64_t* num_copies) {
  if (num_copies != nullptr) *num_copies = 0;
  if (p.num_layers <= 0 || p.block_bytes <= 0 || p.src_key_caches == nullptr ||
      p.src_value_caches == nullptr || p.dst_key_caches == nullptr ||
      p.dst_value_caches == nullptr) {
    return cudaErrorInvalidValue;
  }
  const std::vector<BlockCopyRun> runs = PlanBlockCopyRuns(pairs);
  int64_t copies = 0;
  for (int layer = 0; layer < p.num_layers; ++layer) {
    for (int tensor = 0; tensor < 2; ++tensor) {
      auto* src =
          static_cast<char*>(tensor == 0 ? p.src_key_caches[layer] : p.src_value_caches[layer]);
      auto* dst =
          static_cast<char*>(tensor == 0 ? p.dst_key_caches[layer] : p.dst_value_caches[layer]);
      for (const BlockCopyRun& run : runs) {
        const cudaError_t err =
            cudaMemcpyAsync(dst + run.dst * p.block_bytes, src + run.src * p.block_bytes,
                            run.count * p.block_bytes, p.kind, stream);
        if (err != cudaSuccess) return err;
        ++copies;
      }
    }
  }
  if (num_copies != nullptr) *num_copies = copies;
  return cudaSuccess;
}

}  // namespace pagoda::kernels
