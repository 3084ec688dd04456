#ifndef PAGODA_WORKER_CUDA_GRAPH_BATCH_H_
#define PAGODA_WORKER_CUDA_GRAPH_BATCH_H_

// Host-side shaping of decode batches for CUDA-graph replay
// (worker/cuda/cuda_graph_runner.h). A graph bakes in every address and
// launch shape, so each captured batch size ("bucket") is replayed only with
// batches padded to exactly that shape: the step metadata then lands in the
// same static workspace region, and the kernels see the same grid. No CUDA
// here: CI tests it.

#include <vector>

#include "worker/flat_batch.h"

namespace pagoda::worker {

// vLLM's capture sizes: 1, 2, 4, then multiples of 8, up to and including
// max_num_seqs (the last bucket is max_num_seqs itself when it is not a
// multiple of 8). Ascending. REQUIRES: max_num_seqs >= 1.
std::vector<int> GraphBatchBuckets(int max_num_seqs);

// The smallest bucket holding `num_seqs` sequences, or 0 when none does.
int GraphBucketFor(const std::vector<int>& buckets, int num_seqs);

// True when `batch` can replay a graph: decode only (one query token per
// sequence, each sampled), no block moves handled here, every context within
// max_context_len tokens, every block table within blocks_per_seq, and no
// logit edits or token masks (their upload would move the captured logits).
bool IsGraphableDecode(const FlatBatch& batch, int max_context_len, int blocks_per_seq);

// `batch` padded to `bucket` sequences with block tables of exactly
// `blocks_per_seq` entries per row. A padding sequence has token 0 at
// position 0, slot -1 (its K/V are not written), context length 1 reading
// block 0 (any valid block: its output is never used), and greedy sampling
// parameters. Real rows keep their values and order; logits rows are the
// token rows, 0..bucket-1. REQUIRES: IsGraphableDecode(batch, ...), bucket >=
// batch.num_seqs().
FlatBatch PadDecodeBatch(const FlatBatch& batch, int bucket, int blocks_per_seq);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CUDA_GRAPH_BATCH_H_
