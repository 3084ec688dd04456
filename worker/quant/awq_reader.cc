// AutoAWQ's GEMM layout (see quant_readers.h).
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/quant/quant_readers.h"
#include "worker/quant/quant_tensors.h"

namespace pagoda::worker {
namespace {

// AutoAWQ packs output columns 8j..8j+7 into word j in the order
// 0, 2, 4, 6, 1, 3, 5, 7 (field f holds column 8j + order[f]); so column
// 8j + c is in field kAwqFieldOfColumn[c].
constexpr int kAwqFieldOfColumn[8] = {0, 4, 1, 5, 2, 6, 3, 7};

uint32_t AwqField(const int32_t* row, int64_t column) {
  const uint32_t word = static_cast<uint32_t>(row[column / 8]);
  return (word >> (4 * kAwqFieldOfColumn[column % 8])) & 0xF;
}

}  // namespace

absl::StatusOr<QuantizedWeight> ReadAwqWeight(const WeightStore& store, const QuantConfig& config,
                                              const std::string& module, int64_t out, int64_t in) {
  if (out % 8 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(module, ": AWQ packs 8 output features a word, not ", out));
  }
  absl::StatusOr<int64_t> groups = GroupCount(config, module, in);
  if (!groups.ok()) return groups.status();
  const std::string prefix = module + ".";
  absl::StatusOr<const void*> qweight =
      ReadIntegerTensor(store, prefix + "qweight", IntegerType::kI32, {in, out / 8});
  if (!qweight.ok()) return qweight.status();
  absl::StatusOr<const void*> qzeros =
      ReadIntegerTensor(store, prefix + "qzeros", IntegerType::kI32, {*groups, out / 8});
  if (!qzeros.ok()) return qzeros.status();
  absl::StatusOr<std::vector<float>> scales =
      ReadScaleTensor(store, prefix + "scales", {*groups, out});
  if (!scales.ok()) return scales.status();
  absl::StatusOr<std::vector<int32_t>> group_of_input =
      GroupOfInput(store, /*act_order=*/false, "", in, *groups);
  if (!group_of_input.ok()) return group_of_input.status();

  QuantizedWeight weight = SizedWeight(module, 4, out, in, *groups);
  weight.format = "awq";
  weight.group_of_input = *std::move(group_of_input);
  const auto* words = static_cast<const int32_t*>(*qweight);
  const auto* zero_words = static_cast<const int32_t*>(*qzeros);
  for (int64_t i = 0; i < in; ++i) {
    for (int64_t o = 0; o < out; ++o) {
      weight.codes[o * in + i] = static_cast<uint8_t>(AwqField(words + i * (out / 8), o));
    }
  }
  for (int64_t g = 0; g < *groups; ++g) {
    for (int64_t o = 0; o < out; ++o) {
      weight.scales[o * *groups + g] = (*scales)[g * out + o];
      weight.zeros[o * *groups + g] = static_cast<float>(AwqField(zero_words + g * (out / 8), o));
    }
  }
  return weight;
}

}  // namespace pagoda::worker
