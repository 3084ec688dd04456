#ifndef PAGODA_WORKER_QUANT_QUANT_READERS_H_
#define PAGODA_WORKER_QUANT_QUANT_READERS_H_

// Readers of one quantized module (e.g. "model.layers.0.self_attn.q_proj")
// of a checkpoint into a QuantizedWeight, one per format, each reading the
// tensors exactly as the publisher's tool writes them. Every tensor is
// checked (present, integer type, shape) and each error is one line naming
// it; `out` and `in` are the module's full (unsliced) features.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/safetensors.h"
#include "worker/quant/quant_config.h"
#include "worker/quant/quantized_weight.h"

namespace pagoda::worker {

// AutoAWQ GEMM: qweight [in, out/8] I32 and qzeros [in/G, out/8] I32, eight
// 4-bit fields a word in AutoAWQ's order (output column 8j + c in field
// kAwqFieldOfColumn[c] of word j), scales [in/G, out] float.
absl::StatusOr<QuantizedWeight> ReadAwqWeight(const WeightStore& store, const QuantConfig& config,
                                              const std::string& module, int64_t out, int64_t in);
// GPTQ: qweight [in/p, out] I32 packed along the input (p = 32 / bits,
// fields in order from the low bits), qzeros [G, out/p] I32 packed along the
// output (stored minus one in checkpoint_format gptq, as they are in
// gptq_v2; unused when sym: the zero is 2^(bits-1)), scales [G, out], g_idx
// [in] I32 with desc_act.
absl::StatusOr<QuantizedWeight> ReadGptqWeight(const WeightStore& store, const QuantConfig& config,
                                               const std::string& module, int64_t out, int64_t in);
// compressed-tensors pack-quantized (symmetric): weight_packed [out, in/p]
// I32 packed along the input from the low bits, codes offset by 2^(bits-1);
// weight_scale [out, G]; weight_shape [2] (I64 or I32) = [out, in];
// weight_g_idx [in] I32 with actorder group.
absl::StatusOr<QuantizedWeight> ReadCompressedTensorsWeight(const WeightStore& store,
                                                            const QuantConfig& config,
                                                            const std::string& module, int64_t out,
                                                            int64_t in);
// One code a byte (compressed-tensors int- and float-quantized, vLLM's fp8):
// weight [out, in] I8 (int: stored as value + 128, zero 128) or F8_E4M3 (no
// NaN codes); weight_scale [out, 1] or [out] a channel, [] or [1] a tensor
// (config.per_tensor_scale); input_scale [] or [1] with static FP8 inputs.
absl::StatusOr<QuantizedWeight> ReadByteQuantizedWeight(const WeightStore& store,
                                                        const QuantConfig& config,
                                                        const std::string& module, int64_t out,
                                                        int64_t in);
// Online FP8 (--quantization fp8): the dense `weight` [out, in] (f32, f16 or
// bf16) quantized as one tensor, as vLLM's Fp8LinearMethod does: scale
// max|W| / 448 (1 for an all-zero weight), codes E4M3 of W / scale, rounded
// to nearest even and saturated.
absl::StatusOr<QuantizedWeight> QuantizeOnlineFp8(const WeightStore& store,
                                                  const QuantConfig& config,
                                                  const std::string& module, int64_t out,
                                                  int64_t in);
// The reader of config.method. REQUIRES: config.quantized().
absl::StatusOr<QuantizedWeight> ReadQuantizedWeight(const WeightStore& store,
                                                    const QuantConfig& config,
                                                    const std::string& module, int64_t out,
                                                    int64_t in);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_QUANT_QUANT_READERS_H_
