#include "worker/kv_cache_scales.h"

#include <cmath>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pagoda::worker {
namespace {

// The scale tensor `name` if the checkpoint has it: one positive finite
// float, or INVALID_ARGUMENT naming it.
absl::StatusOr<std::optional<float>> ReadOneKvScale(const WeightStore& store,
                                                    const std::string& name) {
  if (!store.Has(name)) return std::optional<float>();
  absl::StatusOr<TensorView> view = store.Get(name);
  if (!view.ok()) return view.status();
  if (view->integer != IntegerType::kNone) {
    return absl::InvalidArgumentError(absl::StrCat("KV cache scale \"", name, "\" is ",
                                                   IntegerTypeName(view->integer),
                                                   ", expected F32, F16 or BF16"));
  }
  if (view->num_elements() != 1 || view->shape.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat("KV cache scale \"", name, "\" has shape [",
                                                   absl::StrJoin(view->shape, ", "),
                                                   "], expected [] or [1]"));
  }
  absl::StatusOr<std::vector<float>> value = store.GetF32(name, view->shape);
  if (!value.ok()) return value.status();
  const float scale = value->front();
  if (!std::isfinite(scale) || scale <= 0.0f) {
    return absl::InvalidArgumentError(absl::StrCat("KV cache scale \"", name, "\" is ", scale,
                                                   ", expected a finite positive number"));
  }
  return std::optional<float>(scale);
}

}  // namespace

absl::StatusOr<KvCacheScales> ReadKvCacheScales(const WeightStore& store, int layer) {
  const std::string prefix = absl::StrCat("model.layers.", layer, ".self_attn.");
  // Each pair of names in vLLM's order of preference.
  const std::pair<const char*, const char*> kNames[] = {
      {"k_scale", "v_scale"},
      {"k_proj.output_scale", "v_proj.output_scale"},
      {"kv_scale", "kv_scale"}};
  for (const auto& [k_name, v_name] : kNames) {
    absl::StatusOr<std::optional<float>> k = ReadOneKvScale(store, prefix + k_name);
    if (!k.ok()) return k.status();
    absl::StatusOr<std::optional<float>> v = ReadOneKvScale(store, prefix + v_name);
    if (!v.ok()) return v.status();
    if (!k->has_value() && !v->has_value()) continue;
    return KvCacheScales{.k = k->value_or(**v), .v = v->value_or(**k)};
  }
  return KvCacheScales{};
}

}  // namespace pagoda::worker
