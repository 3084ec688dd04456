#ifndef PAGODA_KERNELS_OPS_BLOCK_COPY_PLAN_H_
#define PAGODA_KERNELS_OPS_BLOCK_COPY_PLAN_H_

// Host-only planning of block moves, kept apart from CUDA so it is tested on
// any machine.

#include <cstdint>
#include <span>
#include <vector>

namespace pagoda::kernels {

struct BlockPair {
  int64_t src = 0;
  int64_t dst = 0;
};

// `count` blocks starting at src go to `count` blocks starting at dst.
struct BlockCopyRun {
  int64_t src = 0;
  int64_t dst = 0;
  int64_t count = 0;

  friend bool operator==(const BlockCopyRun&, const BlockCopyRun&) = default;
};

// Sorts the pairs by source and merges pairs whose src and dst both follow on
// from the previous pair into one run: the fewest contiguous copies that move
// exactly these blocks. A duplicated pair is moved once.
std::vector<BlockCopyRun> PlanBlockCopyRuns(std::span<const BlockPair> pairs);

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_OPS_BLOCK_COPY_PLAN_H_
