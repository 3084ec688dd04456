#ifndef PAGODA_COMMON_QUANTIZATION_METHODS_H_
#define PAGODA_COMMON_QUANTIZATION_METHODS_H_

// vLLM's --quantization names that Pagoda serves (and the CPU's
// --cpu-weight-only-activations names), shared by the server
// (which refuses any other name at start, before a worker is spawned) and
// the worker (which checks the name against the checkpoint's
// quantization_config at load: worker/quant/quant_config.h; "fp8" also
// quantizes a dense checkpoint at load). vLLM's other methods
// (bitsandbytes, gguf, ...) are refused by name.

#include <array>
#include <string_view>

namespace pagoda {

// "" and "auto" serve whatever the checkpoint declares; the *_marlin names
// are vLLM's kernels for the same AWQ and GPTQ checkpoints.
inline constexpr std::array<std::string_view, 8> kQuantizationMethods = {
    "", "auto", "awq", "awq_marlin", "gptq", "gptq_marlin", "compressed-tensors", "fp8"};

// The served names for a refusal's line (both --quantization and the
// speculative config's quantization key say it).
inline constexpr char kServedQuantizationMethodsText[] =
    "auto, awq, awq_marlin, gptq, gptq_marlin, compressed-tensors and fp8";

inline bool IsServedQuantizationMethod(std::string_view name) {
  for (std::string_view method : kQuantizationMethods) {
    if (name == method) return true;
  }
  return false;
}

// --cpu-weight-only-activations: how the CPU worker's weight-only int4/int8
// Linears (AWQ, GPTQ, W4A16/W8A16) take their inputs: int8 (quantized per
// group, integer dot products; the default) or float32 (the checkpoint's
// exact weight-only numerics). "" (an older server) means int8.
inline bool IsCpuWeightOnlyActivations(std::string_view name) {
  return name.empty() || name == "int8" || name == "float32";
}

}  // namespace pagoda

#endif  // PAGODA_COMMON_QUANTIZATION_METHODS_H_
