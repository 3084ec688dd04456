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

// Verify steps (speculative decoding): graphs captured with every one of
// `bucket` sequences at `query_rows` query tokens (k + 1: the input token
// and k drafts), which sends attention through the prefill kernel; its grid
// depends only on query_rows and the sequence count, and each sequence's
// rows and context come from the device, so a sequence may have fewer rows
// at replay. The buckets that get verify graphs: GraphBatchBuckets up to
// kMaxVerifyGraphSeqs (where launches weigh most), whose bucket x
// query_rows tokens fit `max_tokens` (the load-time workspace). Empty for
// query_rows < 2.
inline constexpr int kMaxVerifyGraphSeqs = 8;
std::vector<int> VerifyGraphBuckets(int max_num_seqs, int query_rows, int max_tokens);

// True when `batch` can replay a verify graph of `query_rows` rows a
// sequence: not a decode-only batch (those replay the decode graphs), every
// sequence with 1..query_rows query tokens, every context and block table
// within the captured shape, and no logit edits or token masks.
bool IsGraphableVerify(const FlatBatch& batch, int query_rows, int max_context_len,
                       int blocks_per_seq);

// `batch` padded to the verify graph's shape: bucket x query_rows token rows
// (the padding rows, after the real ones, have token 0 at position 0 and
// slot -1, and belong to no sequence: their rows are computed and never
// read), `bucket` sequences (the padding ones with no query rows, context
// length 1, block 0), block tables of `blocks_per_seq` entries, and
// bucket x query_rows logits rows (the real ones first; the padding rows
// read token row 0 and sample greedily). REQUIRES: IsGraphableVerify(batch,
// query_rows, ...), bucket >= batch.num_seqs().
FlatBatch PadVerifyBatch(const FlatBatch& batch, int bucket, int query_rows, int blocks_per_seq);

// What a verify graph is captured with: `bucket` sequences of `query_rows`
// rows each at positions 0.., slot -1 (no K/V written), every row a logits
// row, block tables of `blocks_per_seq` zeros.
FlatBatch DummyVerifyBatch(int bucket, int query_rows, int blocks_per_seq);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CUDA_GRAPH_BATCH_H_
