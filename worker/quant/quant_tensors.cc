#include "worker/quant/quant_tensors.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pagoda::worker {
absl::StatusOr<const void*> ReadIntegerTensor(const WeightStore& store, const std::string& name,
                                              IntegerType type, const std::vector<int64_t>& shape) {
  absl::StatusOr<TensorView> view = store.Get(name);
  if (!view.ok()) return view.status();
  if (view->integer != type) {
    const std::string actual = view->integer == IntegerType::kNone
                                   ? std::string(DTypeName(view->dtype))
                                   : IntegerTypeName(view->integer);
    return absl::InvalidArgumentError(
        absl::StrCat("weight \"", name, "\" is ", actual, ", expected ", IntegerTypeName(type)));
  }
  if (view->shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat("weight \"", name, "\" has shape ",
                                                   ShapeString(view->shape), ", expected ",
                                                   ShapeString(shape)));
  }
  return view->data;
}

absl::StatusOr<std::vector<float>> ReadScaleTensor(const WeightStore& store,
                                                   const std::string& name,
                                                   const std::vector<int64_t>& shape) {
  return store.GetF32(name, shape);
}

absl::StatusOr<int64_t> GroupCount(const QuantConfig& config, const std::string& module,
                                   int64_t in) {
  if (config.group_size == -1) return 1;
  if (in % config.group_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(module, ": group_size ", config.group_size,
                                                   " does not divide its ", in, " input features"));
  }
  return in / config.group_size;
}

absl::StatusOr<std::vector<int32_t>> GroupOfInput(const WeightStore& store, bool act_order,
                                                  const std::string& g_idx_name, int64_t in,
                                                  int64_t groups) {
  std::vector<int32_t> group_of_input(static_cast<size_t>(in));
  if (!act_order) {
    for (int64_t i = 0; i < in; ++i) group_of_input[i] = static_cast<int32_t>(i / (in / groups));
    return group_of_input;
  }
  absl::StatusOr<const void*> data = ReadIntegerTensor(store, g_idx_name, IntegerType::kI32, {in});
  if (!data.ok()) return data.status();
  const auto* g_idx = static_cast<const int32_t*>(*data);
  for (int64_t i = 0; i < in; ++i) {
    if (g_idx[i] < 0 || g_idx[i] >= groups) {
      return absl::InvalidArgumentError(absl::StrCat("weight \"", g_idx_name, "\": entry ", i,
                                                     " is group ", g_idx[i], ", outside [0, ",
                                                     groups, ")"));
    }
    group_of_input[i] = g_idx[i];
  }
  return group_of_input;
}

}  // namespace pagoda::worker
