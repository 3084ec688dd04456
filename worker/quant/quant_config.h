#ifndef PAGODA_WORKER_QUANT_QUANT_CONFIG_H_
#define PAGODA_WORKER_QUANT_QUANT_CONFIG_H_

// QuantConfig: how a checkpoint's linear weights are quantized, read once
// from config.json's `quantization_config` as vLLM does (quant_method picks
// the format; each format's keys as its publisher's tool writes them), and
// the check of a requested --quantization against it.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/quant/quantized_weight.h"

namespace pagoda::worker {

enum class QuantMethod {
  kNone,               // No quantization_config: dense weights.
  kAwq,                // AutoAWQ GEMM: qweight [in, out/8], qzeros, scales.
  kGptq,               // GPTQ / GPTQModel: qweight [in/pack, out], qzeros, scales, g_idx.
  kCompressedTensors,  // pack-quantized (weight_packed), int- and float-quantized (weight).
  kFp8,                // vLLM's fp8: weight F8_E4M3 [out, in], weight_scale, input_scale.
  kOnlineFp8,          // --quantization fp8 over a dense checkpoint: quantized at load.
};

struct QuantConfig {
  QuantMethod method = QuantMethod::kNone;
  std::string method_name;  // quant_method as written ("awq", "gptq", "compressed-tensors").
  int bits = 0;             // 4 or 8.
  int64_t group_size = -1;  // -1: one group per output channel.
  bool symmetric = true;    // GPTQ `sym`, compressed-tensors `symmetric`.
  bool desc_act = false;    // GPTQ act-order: g_idx assigns inputs to groups.
  bool gptq_v2 = false;     // checkpoint_format gptq_v2: zeros stored as they are.
  // compressed-tensors: modules left dense ("lm_head", or "re:" patterns).
  std::vector<std::string> ignore;
  // compressed-tensors pack-quantized (codes packed in I32 words); the int-
  // and float-quantized formats store one code a byte in `weight`.
  bool packed = true;
  CodeType code_type = CodeType::kUnsignedInt;  // kFloat8E4M3: FP8 weights.
  InputQuant input_quant = InputQuant::kNone;   // W8A8: the input's quantization.
  bool per_tensor_scale = false;                // One weight_scale a tensor, not a channel.

  bool quantized() const { return method != QuantMethod::kNone; }
  // For the worker's log: e.g. "awq int4 group 32", "compressed-tensors
  // int8 weights per channel, int8 inputs per token", "dense".
  std::string Describe() const;
  // Whether the module (e.g. "model.layers.0.mlp.down_proj") is quantized.
  bool Quantizes(const std::string& module) const;
};

// Reads `model_dir`/config.json's quantization_config. INVALID_ARGUMENT, one
// line naming the key, for an unknown quant_method or a setting no kernel
// here runs (bits other than 4 and 8, AWQ's GEMV layout, static int8 or
// asymmetric activations, block-quantized FP8, a bad group size).
absl::StatusOr<QuantConfig> LoadQuantConfig(const std::string& model_dir);

// vLLM's --quantization against the checkpoint: "" or "auto" takes the
// checkpoint's; otherwise the name (or a kernel alias vLLM accepts for it,
// e.g. awq_marlin, gptq_marlin) must be the checkpoint's method, except
// "fp8" over a dense checkpoint, which turns `config` into online FP8
// (every linear but lm_head quantized at load per tensor, dynamic
// per-token FP8 inputs). INVALID_ARGUMENT naming both otherwise, and
// `source`, what asked for `requested` ("--speculative-config quantization"
// for a draft model).
absl::Status CheckRequestedQuantization(QuantConfig* config, std::string_view requested,
                                        std::string_view source = "--quantization");

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_QUANT_QUANT_CONFIG_H_
