#ifndef PAGODA_COMMON_SAMPLING_LIMITS_H_
#define PAGODA_COMMON_SAMPLING_LIMITS_H_

// Sampling limits shared by the server's validation (gRPC and HTTP), the
// worker's step-plan check and the samplers (CPU and CUDA), so they can never
// disagree. Dependency-free, like common/dtype_enum.h, for the CUDA kernels.

namespace pagoda {

// The most top logprobs one sampled token may carry (vLLM's default cap).
// The CUDA sampler sizes its per-thread top-k buffers by it, and beam search
// (which asks for 2 x width candidates) is bounded by it.
inline constexpr int kMaxTopLogprobs = 20;

}  // namespace pagoda

#endif  // PAGODA_COMMON_SAMPLING_LIMITS_H_
