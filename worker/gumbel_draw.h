#ifndef PAGODA_WORKER_GUMBEL_DRAW_H_
#define PAGODA_WORKER_GUMBEL_DRAW_H_

// The host sampler's draw (worker/sampler.h's rule, the CUDA sampler's in
// kernels/ops/sampling.cu): Gumbel-max over Philox4x32-10 noise, and the
// bound on that noise that lets a drawn row skip the logs of the tokens that
// cannot win.

#include <bit>
#include <cstdint>

#include "absl/types/span.h"
#include "worker/cpu/simd.h"

namespace pagoda::worker {

// The Gumbel noise of a token whose Philox word is `bits`:
// -log(-log(u)) with u = UniformOpen01(bits), both logs the float libm log,
// as the CUDA kernel computes it. Always finite (u is strictly inside (0, 1)).
float GumbelNoise(uint32_t bits);

// The noise bound table: entry bits >> kGumbelBoundShift is >= GumbelNoise of
// every word in that bucket, and within 2^-9 of the largest (the bucket's
// last uniform's noise, in float64, plus a margin of 2^-10 over the float
// pipeline's error, below 2^-18; worker_sampler_test checks every one of the
// 2^23 uniforms). A bucket is 2^11 consecutive uniforms, so a token whose
// (x - max) / T + bound is below the best score so far cannot win: past the
// first few tokens, about one in 4096 needs its logs.
inline constexpr int kGumbelBoundShift = 20;
inline constexpr int kGumbelBoundBuckets = 1 << (32 - kGumbelBoundShift);
const float* GumbelNoiseBounds();

// Gumbel-max over the tokens whose OrderedFloatKey is at least `min_key` (and
// that are not -inf or NaN): the argmax of fma(x - max_logit, inv_t, noise), the
// noise of token i from Philox stream (seed, sample_index), word i % 4 of
// block i / 4; lowest id on ties. Exact: the same token as evaluating every
// survivor's noise with GumbelNoise. REQUIRES: logits[argmax] = max_logit,
// a survivor. Thread-safe. Runs the candidate scan at BestSimdLevel(), or at
// `level` (tests; REQUIRES: one of SupportedSimdLevels()).
int32_t GumbelMaxDraw(absl::Span<const float> logits, int32_t argmax, uint32_t min_key,
                      float max_logit, float inv_t, uint64_t seed, uint64_t sample_index);
int32_t GumbelMaxDraw(absl::Span<const float> logits, int32_t argmax, uint32_t min_key,
                      float max_logit, float inv_t, uint64_t seed, uint64_t sample_index,
                      SimdLevel level);

// Monotone map from float to unsigned: a < b  <=>  key(a) < key(b). The
// bits of a negative x flipped, of a positive one the sign bit set: an xor
// with a mask, not a branch (the sign of a row's logits is a coin toss).
inline uint32_t OrderedFloatKey(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t negative = static_cast<uint32_t>(static_cast<int32_t>(bits) >> 31);
  return bits ^ (negative | 0x80000000u);
}

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_GUMBEL_DRAW_H_
