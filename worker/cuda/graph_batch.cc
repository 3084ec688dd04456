#include "worker/cuda/graph_batch.h"

#include <algorithm>

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

}  // namespace

FlatBatch PadDecodeBatch(const FlatBatch& batch, int bucket, int blocks_per_seq) {
  const int n = batch.num_seqs();
  FlatBatch padded = batch;
  PadTo(padded.input_ids, bucket, 0);
  PadTo(padded.positions, bucket, 0);
  PadTo(padded.slot_mapping, bucket, -1);
  padded.query_start.resize(bucket + 1);
  for (int s = 0; s <= bucket; ++s) padded.query_start[s] = s;
  PadTo(padded.context_lens, bucket, 1);
  padded.block_tables.assign(static_cast<size_t>(bucket) * blocks_per_seq, 0);
  for (int s = 0; s < n; ++s) {
    std::copy_n(batch.block_tables.begin() + static_cast<size_t>(s) * batch.max_blocks_per_seq,
                batch.max_blocks_per_seq,
                padded.block_tables.begin() + static_cast<size_t>(s) * blocks_per_seq);
  }
  padded.max_blocks_per_seq = blocks_per_seq;
  padded.logits_indices.resize(bucket);
  for (int s = 0; s < bucket; ++s) padded.logits_indices[s] = s;
  PadTo(padded.sample_sequences, bucket, -1);
  PadTo(padded.temperatures, bucket, 0.0f);
  PadTo(padded.top_k, bucket, 0);
  PadTo(padded.top_p, bucket, 1.0f);
  PadTo<uint64_t>(padded.seeds, bucket, 0);
  PadTo<uint64_t>(padded.sample_indices, bucket, 0);
  PadTo(padded.num_logprobs, bucket, 0);
  PadTo(padded.min_p, bucket, 0.0f);
  PadTo(padded.penalties, bucket, LogitPenalties{});
  PadTo<int32_t>(padded.edit_offsets, bucket + 1, padded.edit_offsets.back());
  PadTo<int32_t>(padded.mask_offsets, bucket, -1);
  PadTo<uint8_t>(padded.processed_logprobs, bucket, 0);
  padded.swap_in.clear();
  padded.swap_out.clear();
  padded.copy.clear();
  return padded;
}

}  // namespace pagoda::worker
