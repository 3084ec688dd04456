// compressed-tensors pack-quantized weights (W4A16, W8A16), and the
// dispatch from a QuantConfig to its format's reader (see quant_readers.h).
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/quant/quant_readers.h"
#include "worker/quant/quant_tensors.h"

namespace pagoda::worker {
namespace {

// weight_shape: [2] of I64 (what torch.tensor of ints makes) or I32.
absl::Status CheckWeightShape(const WeightStore& store, const std::string& name, int64_t out,
                              int64_t in) {
  absl::StatusOr<TensorView> view = store.Get(name);
  if (!view.ok()) return view.status();
  int64_t dims[2] = {0, 0};
  if (view->integer == IntegerType::kI32 && view->shape == std::vector<int64_t>{2}) {
    for (int d = 0; d < 2; ++d) dims[d] = static_cast<const int32_t*>(view->data)[d];
  } else if (view->integer == IntegerType::kI64 && view->shape == std::vector<int64_t>{2}) {
    for (int d = 0; d < 2; ++d) dims[d] = static_cast<const int64_t*>(view->data)[d];
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("weight \"", name, "\" must be [2] of I64 or I32"));
  }
  if (dims[0] != out || dims[1] != in) {
    return absl::InvalidArgumentError(absl::StrCat("weight \"", name, "\" says [", dims[0], ", ",
                                                   dims[1], "], expected [", out, ", ", in, "]"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<QuantizedWeight> ReadCompressedTensorsWeight(const WeightStore& store,
                                                            const QuantConfig& config,
                                                            const std::string& module, int64_t out,
                                                            int64_t in) {
  const int bits = config.bits;
  const int64_t per_word = 32 / bits;
  absl::StatusOr<int64_t> groups = GroupCount(config, module, in);
  if (!groups.ok()) return groups.status();
  const std::string prefix = module + ".";
  if (absl::Status s = CheckWeightShape(store, prefix + "weight_shape", out, in); !s.ok()) {
    return s;
  }
  const int64_t words_per_row = (in + per_word - 1) / per_word;
  absl::StatusOr<const void*> packed =
      ReadIntegerTensor(store, prefix + "weight_packed", IntegerType::kI32, {out, words_per_row});
  if (!packed.ok()) return packed.status();
  absl::StatusOr<std::vector<float>> scales =
      ReadScaleTensor(store, prefix + "weight_scale", {out, *groups});
  if (!scales.ok()) return scales.status();
  absl::StatusOr<std::vector<int32_t>> group_of_input =
      GroupOfInput(store, config.desc_act, prefix + "weight_g_idx", in, *groups);
  if (!group_of_input.ok()) return group_of_input.status();

  QuantizedWeight weight = SizedWeight(module, bits, out, in, *groups);
  weight.format = "compressed-tensors";
  weight.group_of_input = *std::move(group_of_input);
  const auto* words = static_cast<const int32_t*>(*packed);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      weight.codes[o * in + i] =
          static_cast<uint8_t>(PackedField(words + o * words_per_row, i, bits));
    }
  }
  // Signed values v were stored as v + 2^(bits-1): that offset is the zero.
  weight.scales = *std::move(scales);
  weight.zeros.assign(weight.scales.size(), static_cast<float>(1 << (bits - 1)));
  return weight;
}

absl::StatusOr<QuantizedWeight> ReadQuantizedWeight(const WeightStore& store,
                                                    const QuantConfig& config,
                                                    const std::string& module, int64_t out,
                                                    int64_t in) {
  switch (config.method) {
    case QuantMethod::kAwq:
      return ReadAwqWeight(store, config, module, out, in);
    case QuantMethod::kGptq:
      return ReadGptqWeight(store, config, module, out, in);
    case QuantMethod::kCompressedTensors:
      if (!config.packed) return ReadByteQuantizedWeight(store, config, module, out, in);
      return ReadCompressedTensorsWeight(store, config, module, out, in);
    case QuantMethod::kFp8:
      return ReadByteQuantizedWeight(store, config, module, out, in);
    case QuantMethod::kOnlineFp8:
      return QuantizeOnlineFp8(store, config, module, out, in);
    case QuantMethod::kNone:
      break;
  }
  return absl::InternalError(absl::StrCat(module, ": not a quantized module"));
}

}  // namespace pagoda::worker
