#include "kernels/ops/block_copy_plan.h"

#include <algorithm>

namespace pagoda::kernels {

std::vector<BlockCopyRun> PlanBlockCopyRuns(std::span<const BlockPair> pairs) {
  std::vector<BlockPair> sorted(pairs.begin(), pairs.end());
  std::sort(sorted.begin(), sorted.end(), [](const BlockPair& a, const BlockPair& b) {
    return a.src != b.src ? a.src < b.src : a.dst < b.dst;
  });
  sorted.erase(std::unique(sorted.begin(), sorted.end(),
                           [](const BlockPair& a, const BlockPair& b) {
                             return a.src == b.src && a.dst == b.dst;
                           }),
               sorted.end());
  std::vector<BlockCopyRun> runs;
  for (const BlockPair& pair : sorted) {
    if (!runs.empty()) {
      BlockCopyRun& last = runs.back();
      if (pair.src == last.src + last.count && pair.dst == last.dst + last.count) {
        ++last.count;
        continue;
      }
    }
    runs.push_back({pair.src, pair.dst, 1});
  }
  return runs;
}

}  // namespace pagoda::kernels
