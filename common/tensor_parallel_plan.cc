#include "common/tensor_parallel_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pagoda {

absl::Status CheckTensorParallelSplit(const ModelConfig& config, int world_size) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor-parallel size must be at least 1, got ", world_size));
  }
  const std::string prefix =
      absl::StrCat("cannot split the model over ", world_size, " tensor-parallel ranks: ");
  if (config.num_attention_heads % world_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "num_attention_heads (",
                                                   config.num_attention_heads,
                                                   ") is not divisible by ", world_size));
  }
  const int kv_heads = config.num_key_value_heads;
  if (kv_heads <= 0 || (kv_heads % world_size != 0 && world_size % kv_heads != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "num_key_value_heads (", kv_heads,
                                                   ") neither divides nor is divisible by ",
                                                   world_size));
  }
  if (config.intermediate_size % world_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "intermediate_size (",
                                                   config.intermediate_size,
                                                   ") is not divisible by ", world_size));
  }
  return CheckVocabParallelSplit(config.vocab_size, world_size);
}

absl::StatusOr<TensorParallelShard> PlanTensorParallelShard(const ModelConfig& config, int rank,
                                                            int world_size) {
  if (absl::Status split = CheckTensorParallelSplit(config, world_size); !split.ok()) {
    return split;
  }
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " outside a tensor-parallel group of ", world_size));
  }
  TensorParallelShard shard;
  shard.rank = rank;
  shard.world_size = world_size;
  const int64_t q_per_rank = config.num_attention_heads / world_size;
  shard.q_heads = {rank * q_per_rank, (rank + 1) * q_per_rank};
  const int kv_heads = config.num_key_value_heads;
  if (kv_heads >= world_size) {
    const int64_t kv_per_rank = kv_heads / world_size;
    shard.kv_heads = {rank * kv_per_rank, (rank + 1) * kv_per_rank};
  } else {
    // Query head h reads KV head h / (num_heads / kv_heads); a rank's query
    // heads all fall in one KV head, which the rank holds a copy of.
    shard.kv_head_replicas = world_size / kv_heads;
    const int64_t kv_head = rank / shard.kv_head_replicas;
    shard.kv_heads = {kv_head, kv_head + 1};
  }
  const int64_t intermediate_per_rank = config.intermediate_size / world_size;
  shard.intermediate = {rank * intermediate_per_rank, (rank + 1) * intermediate_per_rank};
  shard.vocab = VocabParallelRange(config.vocab_size, rank, world_size);
  return shard;
}

int64_t PaddedVocabSize(int64_t vocab) {
  return (vocab + kVocabPadding - 1) / kVocabPadding * kVocabPadding;
}

absl::Status CheckVocabParallelSplit(int64_t vocab, int world_size, absl::string_view name) {
  if (world_size >= 1 && PaddedVocabSize(vocab) % world_size == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "cannot split the vocabulary over ", world_size, " tensor-parallel ranks: ", name, " ", vocab,
      " (padded to ", PaddedVocabSize(vocab), ", a multiple of ", kVocabPadding,
      ") is not divisible by ", world_size));
}

int64_t VocabParallelRowsPerRank(int64_t vocab, int world_size) {
  return PaddedVocabSize(vocab) / world_size;
}

IndexRange VocabParallelRange(int64_t vocab, int rank, int world_size) {
  const int64_t per_rank = VocabParallelRowsPerRank(vocab, world_size);
  const int64_t begin = std::min(vocab, rank * per_rank);
  return {begin, std::min(vocab, begin + per_rank)};
}

}  // namespace pagoda
