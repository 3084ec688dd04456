#include "worker/quant/quantized_weight.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pagoda::worker {

size_t QuantizedWeight::packed_bytes() const {
  const size_t code_bytes = static_cast<size_t>(out_features * in_features) * bits / 8;
  if (code_type == CodeType::kFloat8E4M3 || input_quant != InputQuant::kNone) {
    return code_bytes + static_cast<size_t>(out_features * num_groups) * 4;  // f32 scales.
  }
  return code_bytes + static_cast<size_t>(out_features * num_groups) * 2 * 2;
}

namespace {

// The fields a slice keeps as they are.
void CopyScheme(const QuantizedWeight& from, QuantizedWeight* to) {
  to->name = from.name;
  to->format = from.format;
  to->bits = from.bits;
  to->code_type = from.code_type;
  to->input_quant = from.input_quant;
  to->input_scale = from.input_scale;
}

}  // namespace

QuantizedWeight SizedWeight(const std::string& name, int bits, int64_t out, int64_t in,
                            int64_t groups) {
  QuantizedWeight weight;
  weight.name = name;
  weight.bits = bits;
  weight.out_features = out;
  weight.in_features = in;
  weight.num_groups = groups;
  weight.codes.resize(static_cast<size_t>(out * in));
  weight.scales.resize(static_cast<size_t>(out * groups));
  weight.zeros.resize(weight.scales.size());
  weight.group_of_input.resize(static_cast<size_t>(in));
  return weight;
}

QuantizedWeight SliceOutputs(const QuantizedWeight& weight, int64_t begin, int64_t end) {
  QuantizedWeight slice;
  CopyScheme(weight, &slice);
  slice.out_features = end - begin;
  slice.in_features = weight.in_features;
  slice.num_groups = weight.num_groups;
  slice.group_of_input = weight.group_of_input;
  slice.codes.assign(weight.codes.begin() + begin * weight.in_features,
                     weight.codes.begin() + end * weight.in_features);
  slice.scales.assign(weight.scales.begin() + begin * weight.num_groups,
                      weight.scales.begin() + end * weight.num_groups);
  slice.zeros.assign(weight.zeros.begin() + begin * weight.num_groups,
                     weight.zeros.begin() + end * weight.num_groups);
  if (!weight.bias.empty())
    slice.bias.assign(weight.bias.begin() + begin, weight.bias.begin() + end);
  return slice;
}

namespace {

// Whether input i's group is i / group_size for one group_size (no
// act-order): then a slice must start and end on a group boundary.
bool ContiguousGroups(const QuantizedWeight& weight, int64_t* group_size) {
  *group_size = weight.in_features / weight.num_groups;
  if (*group_size * weight.num_groups != weight.in_features) return false;
  for (int64_t i = 0; i < weight.in_features; ++i) {
    if (weight.group_of_input[i] != i / *group_size) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<QuantizedWeight> SliceInputs(const QuantizedWeight& weight, int64_t begin,
                                            int64_t end) {
  // One group (per-channel scales) spans every input, and each rank keeps
  // it whole: only a slice through a smaller group is refused, as vLLM does.
  int64_t group_size = 0;
  if (weight.num_groups > 1 && ContiguousGroups(weight, &group_size) &&
      (begin % group_size != 0 || end % group_size != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        weight.name, ": tensor parallelism would split a quantization group: input features [",
        begin, ", ", end, ") of ", weight.in_features, " in groups of ", group_size));
  }
  QuantizedWeight slice;
  CopyScheme(weight, &slice);
  slice.out_features = weight.out_features;
  slice.in_features = end - begin;
  slice.num_groups = weight.num_groups;
  slice.scales = weight.scales;
  slice.zeros = weight.zeros;
  slice.bias = weight.bias;
  slice.group_of_input.assign(weight.group_of_input.begin() + begin,
                              weight.group_of_input.begin() + end);
  slice.codes.resize(static_cast<size_t>(slice.out_features * slice.in_features));
  for (int64_t o = 0; o < weight.out_features; ++o) {
    const uint8_t* row = weight.codes.data() + o * weight.in_features;
    std::copy(row + begin, row + end, slice.codes.begin() + o * slice.in_features);
  }
  return slice;
}

absl::StatusOr<QuantizedWeight> StackOutputs(std::vector<QuantizedWeight> parts,
                                             const std::string& name) {
  const std::string first = parts.front().name;
  QuantizedWeight stacked = std::move(parts.front());
  stacked.name = name;
  for (size_t p = 1; p < parts.size(); ++p) {
    QuantizedWeight& part = parts[p];
    if (part.bits != stacked.bits || part.code_type != stacked.code_type ||
        part.input_quant != stacked.input_quant || part.in_features != stacked.in_features ||
        part.num_groups != stacked.num_groups || part.group_of_input != stacked.group_of_input) {
      return absl::InvalidArgumentError(absl::StrCat(
          part.name, ": its bits, code type, input quantization, input features, groups or g_idx ",
          "differ from ", first, "'s, and the two are run as one product"));
    }
    stacked.input_scale = std::max(stacked.input_scale, part.input_scale);
    stacked.out_features += part.out_features;
    stacked.codes.insert(stacked.codes.end(), part.codes.begin(), part.codes.end());
    stacked.scales.insert(stacked.scales.end(), part.scales.begin(), part.scales.end());
    stacked.zeros.insert(stacked.zeros.end(), part.zeros.begin(), part.zeros.end());
  }
  return stacked;
}

}  // namespace pagoda::worker
