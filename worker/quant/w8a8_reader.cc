// The formats that store one code a byte: compressed-tensors int-quantized
// (W8A8 int8) and float-quantized (FP8), vLLM's fp8, and online FP8 made at
// load from a dense weight (see quant_readers.h).
#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/fp8.h"
#include "worker/quant/quant_readers.h"
#include "worker/quant/quant_tensors.h"

namespace pagoda::worker {
namespace {

// Float tensor `name` of one of `shapes`, widened to f32.
absl::StatusOr<std::vector<float>> ReadScaleOfShapes(
    const WeightStore& store, const std::string& name,
    const std::vector<std::vector<int64_t>>& shapes) {
  absl::StatusOr<TensorView> view = store.Get(name);
  if (!view.ok()) return view.status();
  for (const std::vector<int64_t>& shape : shapes) {
    if (view->shape == shape) return ReadScaleTensor(store, name, shape);
  }
  std::vector<std::string> expected;
  for (const std::vector<int64_t>& shape : shapes) {
    expected.push_back(absl::StrCat("[", absl::StrJoin(shape, ", "), "]"));
  }
  return absl::InvalidArgumentError(absl::StrCat("weight \"", name, "\" has shape [",
                                                 absl::StrJoin(view->shape, ", "), "], expected ",
                                                 absl::StrJoin(expected, " or ")));
}

// A scale must be finite and positive: it divides and multiplies.
absl::Status CheckScales(const std::string& name, const std::vector<float>& scales) {
  for (size_t k = 0; k < scales.size(); ++k) {
    if (!std::isfinite(scales[k]) || scales[k] <= 0.0f) {
      return absl::InvalidArgumentError(absl::StrCat("weight \"", name, "\": entry ", k, " is ",
                                                     scales[k],
                                                     ", expected a finite positive scale"));
    }
  }
  return absl::OkStatus();
}

// One scale per output channel, from a per-channel or per-tensor tensor.
absl::StatusOr<std::vector<float>> ChannelScales(const WeightStore& store,
                                                 const QuantConfig& config, const std::string& name,
                                                 int64_t out) {
  absl::StatusOr<std::vector<float>> scales =
      config.per_tensor_scale ? ReadScaleOfShapes(store, name, {{}, {1}})
                              : ReadScaleOfShapes(store, name, {{out, 1}, {out}});
  if (!scales.ok()) return scales.status();
  if (absl::Status s = CheckScales(name, *scales); !s.ok()) return s;
  if (config.per_tensor_scale) scales->assign(static_cast<size_t>(out), scales->front());
  return scales;
}

QuantizedWeight ByteWeight(const QuantConfig& config, const std::string& module, int64_t out,
                           int64_t in) {
  QuantizedWeight weight = SizedWeight(module, 8, out, in, 1);
  weight.format = config.method_name;
  weight.code_type = config.code_type;
  weight.input_quant = config.input_quant;
  return weight;
}

}  // namespace

absl::StatusOr<QuantizedWeight> ReadByteQuantizedWeight(const WeightStore& store,
                                                        const QuantConfig& config,
                                                        const std::string& module, int64_t out,
                                                        int64_t in) {
  const bool fp8 = config.code_type == CodeType::kFloat8E4M3;
  const std::string prefix = module + ".";
  absl::StatusOr<const void*> data = ReadIntegerTensor(
      store, prefix + "weight", fp8 ? IntegerType::kF8E4M3 : IntegerType::kI8, {out, in});
  if (!data.ok()) return data.status();
  absl::StatusOr<std::vector<float>> scales =
      ChannelScales(store, config, prefix + "weight_scale", out);
  if (!scales.ok()) return scales.status();
  QuantizedWeight weight = ByteWeight(config, module, out, in);
  if (config.input_quant == InputQuant::kFp8Static) {
    absl::StatusOr<std::vector<float>> input =
        ReadScaleOfShapes(store, prefix + "input_scale", {{}, {1}});
    if (!input.ok()) return input.status();
    if (absl::Status s = CheckScales(prefix + "input_scale", *input); !s.ok()) return s;
    weight.input_scale = input->front();
  }
  const auto* bytes = static_cast<const uint8_t*>(*data);
  for (int64_t k = 0; k < out * in; ++k) {
    if (fp8 && IsFp8E4M3Nan(bytes[k])) {
      return absl::InvalidArgumentError(absl::StrCat("weight \"", prefix, "weight\": element [",
                                                     k / in, ", ", k % in, "] is NaN"));
    }
    // An int8 value v is held as the code v + 128, zero point 128.
    weight.codes[k] = fp8 ? bytes[k] : static_cast<uint8_t>(bytes[k] ^ 0x80);
  }
  weight.scales = *std::move(scales);
  weight.zeros.assign(weight.scales.size(), fp8 ? 0.0f : 128.0f);
  return weight;
}

absl::StatusOr<QuantizedWeight> QuantizeOnlineFp8(const WeightStore& store,
                                                  const QuantConfig& config,
                                                  const std::string& module, int64_t out,
                                                  int64_t in) {
  absl::StatusOr<std::vector<float>> dense = store.GetF32(module + ".weight", {out, in});
  if (!dense.ok()) return dense.status();
  float amax = 0.0f;
  for (float w : *dense) amax = std::max(amax, std::fabs(w));
  if (!std::isfinite(amax)) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight \"", module, ".weight\" holds a NaN or infinity"));
  }
  const float scale = amax > 0.0f ? amax / kFp8E4M3Max : 1.0f;
  QuantizedWeight weight = ByteWeight(config, module, out, in);
  for (int64_t k = 0; k < out * in; ++k) weight.codes[k] = FloatToFp8E4M3((*dense)[k] / scale);
  weight.scales.assign(static_cast<size_t>(out), scale);
  weight.zeros.assign(static_cast<size_t>(out), 0.0f);
  return weight;
}

}  // namespace pagoda::worker
