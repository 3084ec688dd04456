#ifndef PAGODA_COMMON_SAMPLING_LIMITS_H_
#define PAGODA_COMMON_SAMPLING_LIMITS_H_

// Sampling limits shared by the server's validation (gRPC and HTTP), the
// worker's step-plan check and the samplers (CPU and CUDA), so they can never
// disagree. Dependency-free, like common/dtype_enum.h, for the CUDA kernels.

#include "common/speculation_limits.h"

namespace pagoda {

// The most top logprobs one sampled token may carry (vLLM's default cap).
// The CUDA sampler sizes its per-thread top-k buffers by it, and beam search
// (which asks for 2 x width candidates) is bounded by it.
inline constexpr int kMaxTopLogprobs = 20;

// The largest vocabulary either sampler takes. Top-p sums token masses of up
// to 2^40 (fixed point) in 64 bits, so 2^24 tokens could wrap the sum to 0;
// models past it (none is near: Llama 3 has 128,256 tokens) are refused when
// their config is read.
inline constexpr int kMaxSamplingVocab = (1 << 24) - 1;

// Below this temperature sampling is greedy (argmax, lowest id on ties):
// vLLM's epsilon. The server's validation, the CPU sampler and the CUDA
// sampler all draw the line here.
inline constexpr float kGreedyTemperature = 1e-5f;

// Top-p compares token masses in fixed point: exp(x - max) * 2^40, so the
// largest mass is 2^40 and a kMaxSamplingVocab-token row sums below 2^64.
// Integer sums are exact whatever order threads add them in, so the cut is
// deterministic, and the same on the CPU and the GPU.
inline constexpr float kTopPMassScale = 1099511627776.0f;  // 2^40

// Logits processing bounds (vLLM's where it has one): the server refuses
// requests past them and the worker refuses step plans past them.
inline constexpr float kMaxAbsPenalty = 2.0f;             // presence, frequency
inline constexpr float kMinRepetitionPenalty = 0.01f;     // 0 = off
inline constexpr float kMaxRepetitionPenalty = 2.0f;
inline constexpr float kMaxAbsLogitBias = 100.0f;         // OpenAI's
inline constexpr int kMaxLogitBiasEntries = 300;          // OpenAI's
inline constexpr int kMaxBadWords = 128;
inline constexpr int kMaxBadWordBytes = 256;
// Most stop_token_ids per request: each is checked against every new token,
// and before min_tokens each is banned in every step plan row.
inline constexpr int kMaxStopTokenIds = 1024;
// Most output tokens one SamplingDelta appends to a row's kept penalty
// counts: one step's token and its accepted drafts. The server sends whole
// options past it; the worker refuses a delta past it.
inline constexpr int kMaxAppendedOutputTokens = kMaxSpeculativeTokens + 1;

}  // namespace pagoda

#endif  // PAGODA_COMMON_SAMPLING_LIMITS_H_
