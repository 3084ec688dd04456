#include "worker/cuda/graph_batch.h"

#include <algorithm>
#include <cstdint>

namespace pagoda::worker {

std::vector<int> GraphBatchBuckets(int max_num_seqs) {
  std::vector<int> buckets;
  for (int size : {1, 2, 4}) {
    if (size <= max_num_seqs) buckets.push_back(size);
  }
  for (int size = 8; size <= max_num_seqs; size += 8) buckets.push_back(size);
  if (max_num_seqs > 4 && buckets.back() != max_num_seqs) buckets.push_back(max_num_seqs);
  if (max_num_seqs == 3) buckets.push_back(3);
  return buckets;
}

int GraphBucketFor(const std::vector<int>& buckets, int num_seqs) {
  const auto it = std::lower_bound(buckets.begin(), buckets.end(), num_seqs);
  return it == buckets.end() ? 0 : *it;
}

bool IsGraphableDecode(const FlatBatch& batch, int max_context_len, int blocks_per_seq) {
  const int n = batch.num_seqs();
  if (n == 0 || batch.num_tokens() != n || batch.num_logits_rows() != n) return false;
  if (batch.max_blocks_per_seq > blocks_per_seq) return false;
  // Logit edits and token masks (structured outputs) grow the step's
  // upload region past the captured one, which would move the logits the
  // graph writes: such steps run eagerly.
  if (!batch.edits.empty() || !batch.token_masks.empty()) return false;
  for (int s = 0; s < n; ++s) {
    if (batch.query_start[s + 1] - batch.query_start[s] != 1) return false;
    if (batch.context_lens[s] > max_context_len) return false;
    if (batch.logits_indices[s] != s) return false;
  }
  return true;
}

namespace {

template <typename T>
void PadTo(std::vector<T>& values, size_t size, T value) {
  values.resize(size, value);
}

// `batch`'s block tables widened to `blocks_per_seq` entries for `seqs`
// sequences (the padding ones all block 0).
std::vector<int32_t> WidenBlockTables(const FlatBatch& batch, int seqs, int blocks_per_seq) {
  std::vector<int32_t> tables(static_cast<size_t>(seqs) * blocks_per_seq, 0);
  for (int s = 0; s < batch.num_seqs(); ++s) {
    std::copy_n(batch.block_tables.begin() + static_cast<size_t>(s) * batch.max_blocks_per_seq,
                batch.max_blocks_per_seq, tables.begin() + static_cast<size_t>(s) * blocks_per_seq);
  }
  return tables;
}

// Pads every per-logits-row array to `rows` rows: greedy, no logprobs, no
// processing, no sequence. The logits indices past the real ones read row 0.
void PadLogitsRows(FlatBatch& padded, int rows) {
  PadTo(padded.logits_indices, rows, 0);
  PadTo(padded.sample_sequences, rows, -1);
  PadTo(padded.temperatures, rows, 0.0f);
  PadTo(padded.top_k, rows, 0);
  PadTo(padded.top_p, rows, 1.0f);
  PadTo<uint64_t>(padded.seeds, rows, 0);
  PadTo<uint64_t>(padded.sample_indices, rows, 0);
  PadTo(padded.num_logprobs, rows, 0);
  PadTo(padded.min_p, rows, 0.0f);
  PadTo(padded.penalties, rows, LogitPenalties{});
  PadTo<int32_t>(padded.edit_offsets, rows + 1, padded.edit_offsets.back());
  PadTo<int32_t>(padded.mask_offsets, rows, -1);
  PadTo<uint8_t>(padded.processed_logprobs, rows, 0);
  padded.swap_in.clear();
  padded.swap_out.clear();
  padded.copy.clear();
}

}  // namespace

FlatBatch PadDecodeBatch(const FlatBatch& batch, int bucket, int blocks_per_seq) {
  FlatBatch padded = batch;
  PadTo(padded.input_ids, bucket, 0);
  PadTo(padded.positions, bucket, 0);
  PadTo(padded.slot_mapping, bucket, -1);
  padded.query_start.resize(bucket + 1);
  for (int s = 0; s <= bucket; ++s) padded.query_start[s] = s;
  PadTo(padded.context_lens, bucket, 1);
  padded.block_tables = WidenBlockTables(batch, bucket, blocks_per_seq);
  padded.max_blocks_per_seq = blocks_per_seq;
  // A decode batch's logits rows are its token rows, 0..bucket-1.
  padded.logits_indices.resize(bucket);
  for (int s = 0; s < bucket; ++s) padded.logits_indices[s] = s;
  PadLogitsRows(padded, bucket);
  return padded;
}

std::vector<int> VerifyGraphBuckets(int max_num_seqs, int query_rows, int max_tokens) {
  std::vector<int> buckets;
  if (query_rows < 2) return buckets;
  for (int bucket : GraphBatchBuckets(std::min(max_num_seqs, kMaxVerifyGraphSeqs))) {
    if (int64_t{bucket} * query_rows <= max_tokens) buckets.push_back(bucket);
  }
  return buckets;
}

bool IsGraphableVerify(const FlatBatch& batch, int query_rows, int max_context_len,
                       int blocks_per_seq) {
  const int n = batch.num_seqs();
  if (n == 0 || batch.num_tokens() == n || batch.max_blocks_per_seq > blocks_per_seq) return false;
  if (!batch.edits.empty() || !batch.token_masks.empty()) return false;
  for (int s = 0; s < n; ++s) {
    const int rows = batch.query_start[s + 1] - batch.query_start[s];
    if (rows < 1 || rows > query_rows || batch.context_lens[s] > max_context_len) return false;
  }
  return true;
}

FlatBatch PadVerifyBatch(const FlatBatch& batch, int bucket, int query_rows, int blocks_per_seq) {
  const int tokens = bucket * query_rows;
  FlatBatch padded = batch;
  PadTo(padded.input_ids, tokens, 0);
  PadTo(padded.positions, tokens, 0);
  PadTo(padded.slot_mapping, tokens, -1);
  PadTo(padded.query_start, bucket + 1, batch.query_start.back());
  PadTo(padded.context_lens, bucket, 1);
  padded.block_tables = WidenBlockTables(batch, bucket, blocks_per_seq);
  padded.max_blocks_per_seq = blocks_per_seq;
  PadLogitsRows(padded, tokens);
  return padded;
}

FlatBatch DummyVerifyBatch(int bucket, int query_rows, int blocks_per_seq) {
  FlatBatch dummy;
  dummy.query_start = {0};
  for (int s = 0; s < bucket; ++s) {
    for (int t = 0; t < query_rows; ++t) {
      dummy.input_ids.push_back(0);
      dummy.positions.push_back(t);
      dummy.slot_mapping.push_back(-1);
    }
    dummy.query_start.push_back((s + 1) * query_rows);
    dummy.context_lens.push_back(query_rows);
  }
  dummy.max_blocks_per_seq = blocks_per_seq;
  dummy.block_tables.assign(static_cast<size_t>(bucket) * blocks_per_seq, 0);
  PadLogitsRows(dummy, bucket * query_rows);
  for (int r = 0; r < bucket * query_rows; ++r) dummy.logits_indices[r] = r;
  return dummy;
}

}  // namespace pagoda::worker
