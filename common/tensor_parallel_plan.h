#ifndef PAGODA_COMMON_TENSOR_PARALLEL_PLAN_H_
#define PAGODA_COMMON_TENSOR_PARALLEL_PLAN_H_

// How a model splits across tensor-parallel ranks (Megatron-style): which rows
// or columns of each weight one rank owns, and the rules the server checks
// before any worker starts (heads divisible by the world size, ...).

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model_config.h"

namespace pagoda {

// A half-open index range [begin, end).
struct IndexRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const IndexRange&) const = default;
};

// What one rank of a Megatron-style tensor-parallel group owns:
//   q_proj  rows    q_heads * head_dim         (column-parallel)
//   k/v     rows    kv_heads * head_dim        (column-parallel, or replicated)
//   o_proj  columns q_heads * head_dim         (row-parallel, then all-reduce)
//   gate/up rows    intermediate               (column-parallel)
//   down    columns intermediate               (row-parallel, then all-reduce)
//   embedding / LM head rows vocab            (if the model shards the vocabulary)
// Ranges are in units of heads, intermediate channels and tokens; multiply
// head ranges by head_dim for weight rows.
struct TensorParallelShard {
  int rank = 0;
  int world_size = 1;
  IndexRange q_heads;
  // When world_size exceeds num_key_value_heads, world_size / num_kv_heads
  // consecutive ranks share (each hold a copy of) one KV head: the one their
  // query heads read. Otherwise each rank holds num_kv_heads / world_size.
  IndexRange kv_heads;
  int kv_head_replicas = 1;  // Ranks holding each KV head.
  IndexRange intermediate;
  // The LM head's rows (VocabParallelRange): a rank past the end of a tiny
  // vocabulary owns an empty range.
  IndexRange vocab;
};

// vLLM's ParallelLMHead padding: the vocabulary is padded to a multiple of
// kVocabPadding and split into equal parts, so every rank's part has the same
// padded size; the padding rows hold no token.
inline constexpr int64_t kVocabPadding = 64;

// The vocabulary rounded up to a multiple of kVocabPadding (vLLM's
// pad_vocab_size).
int64_t PaddedVocabSize(int64_t vocab);

// OK when `world_size` divides PaddedVocabSize(vocab), as vLLM's divide()
// asserts (always so for a power of two up to kVocabPadding); otherwise
// INVALID_ARGUMENT in one line naming both sizes, e.g. "cannot split the
// vocabulary over 3 tensor-parallel ranks: vocab_size 32000 (padded to 32000,
// a multiple of 64) is not divisible by 3". `name` is the config key that
// gave `vocab` (an EAGLE-3 head's lm_head spans its draft_vocab_size).
absl::Status CheckVocabParallelSplit(int64_t vocab, int world_size,
                                     absl::string_view name = "vocab_size");

// Rows of the padded vocabulary each of `world_size` ranks owns:
// PaddedVocabSize(vocab) / world_size, for a split CheckVocabParallelSplit
// accepts.
int64_t VocabParallelRowsPerRank(int64_t vocab, int world_size);

// The real (unpadded) token ids rank `rank` owns: [rank * per, (rank + 1) *
// per) clipped to [0, vocab); empty for a rank wholly in the padding.
IndexRange VocabParallelRange(int64_t vocab, int rank, int world_size);

// OK when the model can be split over `world_size` ranks; otherwise
// INVALID_ARGUMENT with one line naming the counts, e.g. "cannot split the
// model over 4 tensor-parallel ranks: num_attention_heads (6) is not
// divisible by 4". Rules: num_attention_heads and intermediate_size divisible
// by world_size; num_key_value_heads divisible by world_size or dividing it;
// the padded vocabulary divisible by world_size (CheckVocabParallelSplit).
absl::Status CheckTensorParallelSplit(const ModelConfig& config, int world_size);

// The shard of `rank`; the errors of CheckTensorParallelSplit, and
// INVALID_ARGUMENT for a rank outside [0, world_size) or world_size < 1.
absl::StatusOr<TensorParallelShard> PlanTensorParallelShard(const ModelConfig& config, int rank,
                                                            int world_size);

}  // namespace pagoda

#endif  // PAGODA_COMMON_TENSOR_PARALLEL_PLAN_H_
