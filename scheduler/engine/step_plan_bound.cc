#include "scheduler/engine/step_plan_bound.h"

#include <algorithm>

#include "common/sampling_limits.h"

namespace pagoda::scheduler {
namespace {

// Protobuf's wire format: a field's tag is at most 2 bytes here (field
// numbers below 2048), a length at most 5, a varint at most 10 (a negative
// int32 is sign-extended to 10 bytes).
constexpr int64_t kTagBytes = 2;
constexpr int64_t kLengthBytes = 5;
constexpr int64_t kMaxVarintBytes = 10;
// A nested message's or packed list's tag and length.
constexpr int64_t kFieldHeaderBytes = kTagBytes + kLengthBytes;
// A row's scalar fields (seq_id, start_position, do_sample, sample_index,
// num_prompt_top_logprobs, token_mask_follows, input_from_last_sample,
// lora_slot, num_draft_proposals, num_next_draft_proposals and the sampling
// scalars: 20 fields at most), each tag + value at most kTagBytes +
// kMaxVarintBytes.
constexpr int64_t kRowScalarBytes = 20 * (kTagBytes + kMaxVarintBytes);
// Block ids are below the pool's size, which the workers' profiling sets
// later: any non-negative int32, 5 bytes at most.
constexpr int64_t kBlockIdBytes = 5;
// One BlockMove: its header and two block ids (src, dst).
constexpr int64_t kBlockMoveBytes = kFieldHeaderBytes + 2 * (kTagBytes + kBlockIdBytes);
// Bad words are tokenized with and without a leading space (vLLM): two
// token sequences per word, each banning one id.
constexpr int64_t kMaxBadWordSequences = 2 * int64_t{kMaxBadWords};

// Bytes of a varint holding values up to `max_value` (>= 0).
int64_t VarintBytes(int64_t max_value) {
  int64_t bytes = 1;
  for (uint64_t value = static_cast<uint64_t>(max_value); value >= 128; value >>= 7) ++bytes;
  return bytes;
}

// One row's sampling options at their bounds, with its header.
int64_t MaxSamplingBytes(const StepPlanLimits& limits) {
  const int64_t vocab = limits.vocab_size;
  const int64_t id_bytes = VarintBytes(vocab - 1);
  const int64_t logit_bias = 2 * kFieldHeaderBytes + kMaxLogitBiasEntries * (id_bytes + 4);
  const int64_t allowed = kFieldHeaderBytes + vocab * id_bytes;
  const int64_t banned =
      kFieldHeaderBytes +
      (kMaxBadWordSequences + kMaxStopTokenIds + limits.num_eos_token_ids) * kMaxVarintBytes;
  // Distinct prompt tokens, and distinct output tokens with their counts:
  // together at most max_model_len, and each list at most the vocabulary.
  const int64_t distinct = std::min<int64_t>(limits.max_model_len, 2 * vocab);
  const int64_t counts =
      3 * kFieldHeaderBytes + distinct * (id_bytes + VarintBytes(limits.max_model_len));
  const int64_t token_mask = kFieldHeaderBytes + 4 * ((vocab + 31) / 32);
  return kFieldHeaderBytes + logit_bias + allowed + banned + counts + token_mask;
}

}  // namespace

int64_t MaxStepPlanBytes(const StepPlanLimits& limits) {
  const int64_t rows = limits.max_num_seqs;
  const int64_t id_bytes = VarintBytes(limits.vocab_size - 1);
  const int64_t blocks_per_row =
      (int64_t{limits.max_model_len} + limits.block_size - 1) / limits.block_size;
  const int64_t block_table = kFieldHeaderBytes + blocks_per_row * kBlockIdBytes;
  // Each row: its header, scalars, the list headers of its token ids and
  // prompt logprob targets, its block table and sampling options.
  const int64_t per_row = kFieldHeaderBytes + kRowScalarBytes + 2 * kFieldHeaderBytes +
                          block_table + MaxSamplingBytes(limits);
  // The step's token ids, and as many prompt logprob targets, spread over
  // the rows: the budget's prompt tokens (a whole prompt of max_model_len
  // without chunked prefill), plus one per decoding row, which the budget
  // never holds back (scheduler_prefill.cc).
  const int64_t step_tokens =
      std::max<int64_t>(limits.max_num_batched_tokens, limits.max_model_len) + rows;
  const int64_t tokens = 2 * step_tokens * id_bytes;
  // Swapped in, swapped out and copied blocks: at most every block the
  // step's rows hold, for each of the three.
  const int64_t moves = 3 * rows * blocks_per_row * kBlockMoveBytes;
  const int64_t step_id = kTagBytes + kMaxVarintBytes;
  return step_id + rows * per_row + tokens + moves;
}

}  // namespace pagoda::scheduler
