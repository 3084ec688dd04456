#ifndef PAGODA_KERNELS_OPS_SWAP_BLOCKS_H_
#define PAGODA_KERNELS_OPS_SWAP_BLOCKS_H_

// Block moves by cudaMemcpyAsync (swap in, swap out), same KV layout as
// cache_ops.h. Stateless; callers own the caches and keep them alive until
// the stream has run past the copies.

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "kernels/ops/block_copy_plan.h"

namespace pagoda::kernels {

// Moves blocks between device memory and pinned host memory (swap in / out),
// or within one of them. Runs of consecutive (src, dst) ids are coalesced into
// one cudaMemcpyAsync per run per layer per tensor (PlanBlockCopyRuns); layers
// and K/V are separate allocations, so runs cannot merge across them.
struct SwapBlocksParams {
  // Host arrays of num_layers base pointers. Host-side caches MUST be pinned
  // (cudaHostAlloc), or the copies are neither asynchronous nor overlapped.
  void* const* src_key_caches = nullptr;
  void* const* src_value_caches = nullptr;
  void* const* dst_key_caches = nullptr;
  void* const* dst_value_caches = nullptr;
  int num_layers = 0;
  int64_t block_bytes = 0;
  cudaMemcpyKind kind = cudaMemcpyDefault;
};
// `pairs` are (src block, dst block) in any order. REQUIRES: no dst repeats.
// Returns the first failing call's error; `num_copies` (optional) receives
// the number of cudaMemcpyAsync calls made.
cudaError_t SwapBlocks(const SwapBlocksParams& params, std::span<const BlockPair> pairs,
                       cudaStream_t stream, int64_t* num_copies = nullptr);

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_OPS_SWAP_BLOCKS_H_
