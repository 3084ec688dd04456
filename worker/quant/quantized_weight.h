#ifndef PAGODA_WORKER_QUANT_QUANTIZED_WEIGHT_H_
#define PAGODA_WORKER_QUANT_QUANTIZED_WEIGHT_H_

// QuantizedWeight: one quantized projection unpacked from its checkpoint
// format (AWQ, GPTQ, compressed-tensors int and float, vLLM's fp8, online
// FP8) into one host form that every backend's quantized Linear is built
// from, with the tensor-parallel slicing and the q/k/v (gate/up) stacking
// the model applies to it.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/fp8.h"

namespace pagoda::worker {

// What a code stands for: an unsigned integer (AWQ, GPTQ, compressed-tensors
// int: signed values stored offset by 2^(bits-1)) or an FP8 E4M3 value.
enum class CodeType { kUnsignedInt, kFloat8E4M3 };

// How the Linear quantizes each token row of its input before the product
// (the W8A8 formats, as vLLM's kernels do); weight-only formats take x as
// it is.
enum class InputQuant {
  kNone,
  kInt8PerToken,  // Symmetric int8, scale max|x| / 127 per row.
  kFp8PerToken,   // E4M3, scale max|x| / 448 per row.
  kFp8Static,     // E4M3, the checkpoint's input_scale, saturated to +-448.
};

// W[o, i] = (value(codes[o, i]) - zeros[o, g]) * scales[o, g],
// g = group_of_input[i], value the code itself or its E4M3 value: exactly
// the weight the publisher's tool dequantizes (zero points in code units,
// already corrected for GPTQ's stored-minus-one; 0 for FP8).
struct QuantizedWeight {
  std::string name;    // The checkpoint's module, e.g. "model.layers.0.mlp.down_proj".
  std::string format;  // Its quant_method ("awq", "gptq", "compressed-tensors"), for messages.
  int bits = 4;        // 4 or 8: codes lie in [0, 2^bits).
  int64_t out_features = 0;
  int64_t in_features = 0;
  int64_t num_groups = 0;
  std::vector<uint8_t> codes;           // [out, in], one code a byte.
  std::vector<float> scales;            // [out, num_groups]
  std::vector<float> zeros;             // [out, num_groups]
  std::vector<int32_t> group_of_input;  // [in], each in [0, num_groups).
  std::vector<float> bias;              // [out], or empty: none.
  CodeType code_type = CodeType::kUnsignedInt;
  InputQuant input_quant = InputQuant::kNone;
  float input_scale = 0.0f;  // kFp8Static's scale.

  float Dequantized(int64_t o, int64_t i) const {
    const size_t g = static_cast<size_t>(o * num_groups + group_of_input[i]);
    const uint8_t code = codes[o * in_features + i];
    const float value =
        code_type == CodeType::kFloat8E4M3 ? Fp8E4M3ToFloat(code) : static_cast<float>(code);
    return (value - zeros[g]) * scales[g];
  }
  // Bytes the weight takes packed as its checkpoint holds it: codes at
  // `bits` each, f16 scales and zero points per group.
  size_t packed_bytes() const;
};

// A weight of these sizes with its arrays sized (codes [out, in], scales
// and zeros [out, groups], group_of_input [in]) and zero-filled.
QuantizedWeight SizedWeight(const std::string& name, int bits, int64_t out, int64_t in,
                            int64_t groups);

// Output features [begin, end) (column parallel: q/k/v, gate/up).
QuantizedWeight SliceOutputs(const QuantizedWeight& weight, int64_t begin, int64_t end);
// Input features [begin, end) (row parallel: o, down). Groups keep their
// numbering (groups with no input left are harmless). INVALID_ARGUMENT naming
// the sizes when the slice would split one of several groups of contiguous
// inputs (a checkpoint without act-order; per-channel scales never split).
absl::StatusOr<QuantizedWeight> SliceInputs(const QuantizedWeight& weight, int64_t begin,
                                            int64_t end);
// The parts' output rows one after another (q, k, v; gate, up): one product
// for all. INVALID_ARGUMENT naming the parts unless they share bits, code
// type, input quantization, input features, groups and the inputs' groups
// (act-order parts quantized on the same input do). Static input scales
// differ per part: the stack takes their largest, as vLLM does.
absl::StatusOr<QuantizedWeight> StackOutputs(std::vector<QuantizedWeight> parts,
                                             const std::string& name);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_QUANT_QUANTIZED_WEIGHT_H_
