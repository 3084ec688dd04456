#ifndef PAGODA_WORKER_DRAFT_BATCH_BUILDER_H_
#define PAGODA_WORKER_DRAFT_BATCH_BUILDER_H_

// DraftBatchBuilder: the batches a worker-side proposer (a draft model or an
// EAGLE head, worker/draft_model.h) runs, built out of the rows and block
// tables of the batch the target verifies: greedy, without logits
// processing, adapters or masks, since a proposer only writes its own K/V
// and picks argmaxes.

#include <cstdint>

#include "absl/types/span.h"
#include "worker/flat_batch.h"

namespace pagoda::worker {

class DraftBatchBuilder {
 public:
  explicit DraftBatchBuilder(const FlatBatch& verify);

  // Adds sequence `seq` of the verify batch over its rows [first, end),
  // with `input` as the first row's token when given (>= 0), and a logits
  // row at its last row when `wants_logits`.
  void AddSequence(int seq, int first, int end, int32_t input, bool wants_logits);

  // Adds sequence `seq` of the verify batch with rows of its own: tokens[i]
  // at position first_position + i, its slot where the sequence's block
  // table (of `block_size`-token blocks) puts that position; a logits row
  // at the last when `wants_logits`. REQUIRES: tokens is not empty and the
  // block table covers the positions.
  void AddRows(int seq, int first_position, absl::Span<const int32_t> tokens, bool wants_logits,
               int block_size);

  FlatBatch Take();

 private:
  void EndSequence(int seq, int last_position, bool wants_logits);
  void AddGreedyLogitsRow(int row);

  const FlatBatch& verify_;
  FlatBatch batch_;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_DRAFT_BATCH_BUILDER_H_
