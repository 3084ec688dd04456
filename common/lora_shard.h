// Tensor-parallel slicing of a LoRA adapter, consistent with the base
// weights' Megatron split (common/tensor_parallel_plan.h):
//   column-parallel q/k/v, gate/up: the rank owns rows of W, so it takes the
//     same rows of B ([out, r]) and all of A: its outputs are exact.
//   row-parallel o, down: the rank owns columns of W (its part of the input),
//     so it takes the same columns of A ([r, in]) and all of B: its output is
//     a partial sum B·(A_cols · x_part), completed by the all-reduce that
//     already sums the base projection's partial outputs.
//   embed_tokens (its update and trainable-token rows): whole on every
//     rank, as the embedding is.
//   lm_head (likewise): rank 0 only, which applies it to the gathered
//     logits it samples.
#ifndef PAGODA_COMMON_LORA_SHARD_H_
#define PAGODA_COMMON_LORA_SHARD_H_

#include "absl/status/statusor.h"
#include "common/lora_adapter.h"
#include "common/model_config.h"
#include "common/tensor_parallel_plan.h"

namespace pagoda {

// True for o_proj and down_proj (row-parallel: the input is split).
bool IsRowParallel(LoraModule module);

// The range of W's split dimension that `shard` owns for `module`: output
// rows for column-parallel modules, input columns for row-parallel ones.
IndexRange LoraShardRange(const ModelConfig& base, const TensorParallelShard& shard,
                          LoraModule module);

// `full`'s part for `shard`. INVALID_ARGUMENT when `full`'s shape is not the
// base model's for `module`.
absl::StatusOr<LoraMatrices> ShardLoraMatrices(const LoraMatrices& full, const ModelConfig& base,
                                               const TensorParallelShard& shard, LoraModule module);

// Every present projection of `adapter` sliced for `shard`.
absl::StatusOr<LoraAdapter> ShardLoraAdapter(const LoraAdapter& adapter, const ModelConfig& base,
                                             const TensorParallelShard& shard);

}  // namespace pagoda

#endif  // PAGODA_COMMON_LORA_SHARD_H_
