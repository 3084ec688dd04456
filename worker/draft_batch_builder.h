#ifndef PAGODA_WORKER_DRAFT_BATCH_BUILDER_H_
#define PAGODA_WORKER_DRAFT_BATCH_BUILDER_H_

// DraftBatchBuilder: the batches a worker-side proposer (a draft model or an
// EAGLE head, worker/draft_model.h) runs, built out of the rows and block
// tables of the batch the target verifies, without logits processing,
// adapters or masks, since a proposer only writes its own K/V and picks one
// token a row: the argmax, or a draw coupled to the target's (AddSequence's
// `sampling_row`).

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "worker/flat_batch.h"

namespace pagoda::worker {

class DraftBatchBuilder {
 public:
  explicit DraftBatchBuilder(const FlatBatch& verify);

  // Adds sequence `seq` of the verify batch over its rows [first, end),
  // with `input` as the first row's token when given (>= 0), and a logits
  // row at its last row when `wants_logits`: greedy, or, when
  // `sampling_row` >= 0, drawn as the verify batch's logits row
  // `sampling_row` is (its temperature, top-k, top-p, min-p, seed and
  // sample index; not its penalties, edits or mask). The draft's draw and
  // the target's then share their Gumbel noise (sampler.h), so they agree
  // wherever the two models' distributions do.
  void AddSequence(int seq, int first, int end, int32_t input, bool wants_logits,
                   int sampling_row = -1);

  // Adds sequence `seq` of the verify batch with rows of its own: tokens[i]
  // at position first_position + i, its slot where the sequence's block
  // table (of `block_size`-token blocks) puts that position; a logits row
  // at the last when `wants_logits`, greedy or drawn as AddSequence's.
  // REQUIRES: tokens is not empty and the block table covers the positions.
  void AddRows(int seq, int first_position, absl::Span<const int32_t> tokens, bool wants_logits,
               int block_size, int sampling_row = -1);

  // Per sequence of `verify`, its first logits row (-1 without one): the
  // row that checks its first draft; row + j checks draft j.
  static std::vector<int> FirstLogitsRows(const FlatBatch& verify);

  FlatBatch Take();

 private:
  void EndSequence(int seq, int last_position, bool wants_logits, int sampling_row = -1);
  // A logits row at `row`, greedy, or sampled as the verify batch's
  // `sampling_row`.
  void AddLogitsRow(int row, int sampling_row);

  const FlatBatch& verify_;
  FlatBatch batch_;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_DRAFT_BATCH_BUILDER_H_
