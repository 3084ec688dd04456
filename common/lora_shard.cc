#include "common/lora_shard.h"

#include "absl/strings/str_cat.h"

namespace pagoda {
namespace {

IndexRange Scaled(IndexRange range, int64_t unit) { return {range.begin * unit, range.end * unit}; }

}  // namespace

bool IsRowParallel(LoraModule module) {
  return module == LoraModule::kO || module == LoraModule::kDown;
}

IndexRange LoraShardRange(const ModelConfig& base, const TensorParallelShard& shard,
                          LoraModule module) {
  switch (module) {
    case LoraModule::kQ:
    case LoraModule::kO:
      return Scaled(shard.q_heads, base.head_dim);
    case LoraModule::kK:
    case LoraModule::kV:
      return Scaled(shard.kv_heads, base.head_dim);
    case LoraModule::kGate:
    case LoraModule::kUp:
    case LoraModule::kDown:
      return shard.intermediate;
  }
  return {};
}

absl::StatusOr<LoraMatrices> ShardLoraMatrices(const LoraMatrices& full, const ModelConfig& base,
                                               const TensorParallelShard& shard,
                                               LoraModule module) {
  const LinearShape shape = LoraModuleShape(base, module);
  if (full.in != shape.in || full.out != shape.out || full.rank < 1 ||
      full.a.size() != static_cast<size_t>(full.rank * full.in) ||
      full.b.size() != static_cast<size_t>(full.out * full.rank)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoRA ", LoraModuleName(module), " has A [", full.rank, ", ", full.in, "] and B [",
        full.out, ", ", full.rank, "], expected in ", shape.in, " and out ", shape.out));
  }
  const IndexRange range = LoraShardRange(base, shard, module);
  LoraMatrices part{full.rank, full.in, full.out, {}, {}};
  if (IsRowParallel(module)) {
    part.in = range.size();
    part.b = full.b;
    part.a.reserve(full.rank * part.in);
    for (int k = 0; k < full.rank; ++k) {
      const float* row = full.a.data() + k * full.in;
      part.a.insert(part.a.end(), row + range.begin, row + range.end);
    }
  } else {
    part.out = range.size();
    part.a = full.a;
    part.b.assign(full.b.begin() + range.begin * full.rank, full.b.begin() + range.end * full.rank);
  }
  return part;
}

absl::StatusOr<LoraAdapter> ShardLoraAdapter(const LoraAdapter& adapter, const ModelConfig& base,
                                             const TensorParallelShard& shard) {
  LoraAdapter sharded;
  sharded.config = adapter.config;
  sharded.scale = adapter.scale;
  sharded.layers.resize(adapter.layers.size());
  for (size_t layer = 0; layer < adapter.layers.size(); ++layer) {
    for (LoraModule module : kAllLoraModules) {
      const auto& full = adapter.layers[layer][static_cast<int>(module)];
      if (!full) continue;
      auto part = ShardLoraMatrices(*full, base, shard, module);
      if (!part.ok()) return part.status();
      sharded.layers[layer][static_cast<int>(module)] = *std::move(part);
    }
  }
  sharded.embed_tokens = adapter.embed_tokens;
  sharded.embed_token_rows = adapter.embed_token_rows;
  if (shard.rank == 0) {
    sharded.lm_head = adapter.lm_head;
    sharded.lm_head_token_rows = adapter.lm_head_token_rows;
  }
  return sharded;
}

}  // namespace pagoda
