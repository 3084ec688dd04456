#ifndef PAGODA_WORKER_SHARDED_WEIGHTS_H_
#define PAGODA_WORKER_SHARDED_WEIGHTS_H_

// What one tensor-parallel rank reads of the checkpoint: its slices of each
// weight, Megatron-style, read from the mapping without the others' bytes.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/model_config.h"
#include "common/safetensors.h"
#include "common/tensor_parallel_plan.h"

// What one tensor-parallel rank reads of the checkpoint, Megatron-style. A
// rank reads only the bytes of its slices from the memory-mapped safetensors,
// so its resident memory holds its shard, not the whole model.
//
//   q_proj            rows of its query heads        (column-parallel)
//   k_proj, v_proj    rows of its KV heads           (column-parallel; a KV
//                     head is copied to every rank whose query heads read it
//                     when there are fewer KV heads than ranks)
//   o_proj            columns of its query heads     (row-parallel: partial
//                     sums, then an all-reduce)
//   gate_proj/up_proj rows of its intermediate slice (column-parallel)
//   down_proj         columns of its slice           (row-parallel: all-reduce)
//   norms             whole (tiny)
//
//   lm_head           rows of its vocabulary part    (vocabulary-parallel, as
//                     vLLM's ParallelLMHead: the vocabulary padded to a
//                     multiple of 64 and split evenly; each rank computes its
//                     logits and rank 0, which samples, gathers them:
//                     vocab_parallel_head.h)
//
// The embedding is not split: it is a row lookup (no arithmetic to share)
// and a vocabulary-parallel one would cost a masked lookup and one more
// all-reduce of [tokens, hidden] each step. A tied lm_head reads its rank's
// rows of the whole embedding.
namespace pagoda::worker {

// How one tensor is cut: the whole of it, rows [begin, end) or columns
// [begin, end) of a 2-D [rows, cols] tensor. 1-D tensors (biases) take kRows.
struct WeightSlice {
  enum class Axis { kWhole, kRows, kColumns };
  Axis axis = Axis::kWhole;
  int64_t begin = 0;
  int64_t end = 0;

  static WeightSlice Whole() { return {}; }
  static WeightSlice Rows(int64_t begin, int64_t end) { return {Axis::kRows, begin, end}; }
  static WeightSlice Columns(int64_t begin, int64_t end) { return {Axis::kColumns, begin, end}; }
};

// Host bytes of a (sliced) tensor in its checkpoint dtype: a view into the
// mapping for whole tensors and row slices (valid while the WeightStore
// lives), an owned dense copy for column slices (strided in the file).
struct HostWeight {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // The slice's shape.
  const void* data = nullptr;  // Points into the mapping or into `owned`.
  size_t nbytes = 0;
  std::vector<uint8_t> owned;

  HostWeight() = default;
  HostWeight(const HostWeight&) = delete;
  HostWeight& operator=(const HostWeight&) = delete;
  HostWeight(HostWeight&&) = default;
  HostWeight& operator=(HostWeight&&) = default;
};

// Reads `slice` of tensor `name`, whose full shape must be `full_shape`
// (INVALID_ARGUMENT naming the tensor otherwise; NOT_FOUND when absent).
absl::StatusOr<HostWeight> ReadWeightSlice(const WeightStore& store, const std::string& name,
                                           const std::vector<int64_t>& full_shape,
                                           const WeightSlice& slice);

// The slices of one decoder layer's weights for a rank (the same in every
// layer), in checkpoint rows/columns.
struct LayerSlices {
  WeightSlice q;        // q_proj rows, q bias.
  WeightSlice kv;       // k_proj / v_proj rows, k / v biases.
  WeightSlice o;        // o_proj columns.
  WeightSlice gate_up;  // gate_proj / up_proj rows.
  WeightSlice down;     // down_proj columns.
};
LayerSlices PlanLayerSlices(const ModelConfig& config, const TensorParallelShard& shard);

// The model as one rank runs it: num_attention_heads, num_key_value_heads
// and intermediate_size are the rank's own counts; everything else (hidden
// size, head_dim, vocabulary) is the model's. REQUIRES: config.head_dim > 0.
ModelConfig RankLocalConfig(const ModelConfig& config, const TensorParallelShard& shard);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_SHARDED_WEIGHTS_H_
