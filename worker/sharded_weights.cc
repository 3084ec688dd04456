#include "worker/sharded_weights.h"

#include "common/tensor_slice.h"

namespace pagoda::worker {
namespace {

HostWeight FromView(const TensorView& view) {
  HostWeight weight;
  weight.dtype = view.dtype;
  weight.shape = view.shape;
  weight.data = view.data;
  weight.nbytes = view.nbytes;
  return weight;
}

}  // namespace

absl::StatusOr<HostWeight> ReadWeightSlice(const WeightStore& store, const std::string& name,
                                           const std::vector<int64_t>& full_shape,
                                           const WeightSlice& slice) {
  const bool whole_columns = slice.axis == WeightSlice::Axis::kColumns && full_shape.size() == 2 &&
                             slice.begin == 0 && slice.end == full_shape[1];
  if (slice.axis == WeightSlice::Axis::kWhole || whole_columns) {
    // All rows: a view that checks the name and shape without reading data.
    absl::StatusOr<TensorView> view =
        SliceRows(store, name, full_shape, 0, full_shape.empty() ? 1 : full_shape[0]);
    if (!view.ok()) return view.status();
    return FromView(*view);
  }
  if (slice.axis == WeightSlice::Axis::kRows) {
    absl::StatusOr<TensorView> view = SliceRows(store, name, full_shape, slice.begin, slice.end);
    if (!view.ok()) return view.status();
    return FromView(*view);
  }
  absl::StatusOr<OwnedTensor> columns =
      SliceColumns(store, name, full_shape, slice.begin, slice.end);
  if (!columns.ok()) return columns.status();
  HostWeight weight;
  weight.dtype = columns->dtype;
  weight.shape = columns->shape;
  weight.owned = std::move(columns->bytes);
  weight.data = weight.owned.data();
  weight.nbytes = weight.owned.size();
  return weight;
}

LayerSlices PlanLayerSlices(const ModelConfig& config, const TensorParallelShard& shard) {
  const int64_t head_dim = config.head_dim;
  return LayerSlices{
      .q = WeightSlice::Rows(shard.q_heads.begin * head_dim, shard.q_heads.end * head_dim),
      .kv = WeightSlice::Rows(shard.kv_heads.begin * head_dim, shard.kv_heads.end * head_dim),
      .o = WeightSlice::Columns(shard.q_heads.begin * head_dim, shard.q_heads.end * head_dim),
      .gate_up = WeightSlice::Rows(shard.intermediate.begin, shard.intermediate.end),
      .down = WeightSlice::Columns(shard.intermediate.begin, shard.intermediate.end)};
}

ModelConfig RankLocalConfig(const ModelConfig& config, const TensorParallelShard& shard) {
  ModelConfig local = config;
  local.num_attention_heads = static_cast<int>(shard.q_heads.size());
  local.num_key_value_heads = static_cast<int>(shard.kv_heads.size());
  local.intermediate_size = static_cast<int>(shard.intermediate.size());
  return local;
}

}  // namespace pagoda::worker
