#ifndef PAGODA_COMMON_LORA_LIMITS_H_
#define PAGODA_COMMON_LORA_LIMITS_H_

// The bounds of LoRA serving that the server checks at start (its flags)
// and the worker checks again at load (LoadModelRequest, LoadLoraAdapter):
// one definition for both sides.

#include <cstddef>

namespace pagoda {

// Longest adapter path a load may carry (Linux's PATH_MAX): the HTTP load
// route and the worker's LoadLoraAdapter both refuse longer ones.
inline constexpr size_t kMaxLoraPathBytes = 4096;

// Adapter slots a worker holds (--max-loras): far above any deployment's
// (vLLM's own tests use a few dozen); bounds a hostile LoadModelRequest.
// Empty slots cost a pointer each.
inline constexpr int kMaxLoraSlots = 1024;
// vLLM's largest --max-lora-rank.
inline constexpr int kMaxLoraRank = 512;
// Trainable tokens an adapter may replace per module
// (--max-lora-trainable-tokens; vLLM sets no bound): each is a whole
// embedding or head row, so this bounds an adapter's rows to 2 · 16384 ·
// hidden floats (512 MiB at hidden 4096).
inline constexpr int kMaxLoraTrainableTokens = 1 << 14;
// Adapters the server keeps in host memory (--max-cpu-loras): a bound that
// keeps a typo from asking for millions.
inline constexpr int kMaxCpuLoras = 1 << 16;

}  // namespace pagoda

#endif  // PAGODA_COMMON_LORA_LIMITS_H_
