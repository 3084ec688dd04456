#include "worker/gumbel_draw.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "kernels/ops/philox.h"
#include "worker/cpu/simd.h"

namespace pagoda::worker {
namespace {

using ::pagoda::kernels::PhiloxDraws;
using ::pagoda::kernels::UniformOpen01;

static_assert(kGumbelBoundShift == kGumbelScanBoundShift);

// Tokens a candidate scan covers (a multiple of 64, the widest level's pass).
constexpr size_t kGumbelDrawChunk = 2048;

// What the float pipeline of GumbelNoise may add to the exact noise: each of
// its two logs is within 1 ulp (glibc's logf: 0.82), the inner one's
// relative error passes to the outer log as an absolute one (2^-23), and the
// outer one's ulp is at most 2^-19 (|noise| < 17). 2^-10 is far above.
constexpr double kGumbelFloatErrorMargin = 0x1p-10;

std::array<float, kGumbelBoundBuckets> MakeGumbelNoiseBounds() {
  std::array<float, kGumbelBoundBuckets> bounds{};
  for (uint32_t bucket = 0; bucket < kGumbelBoundBuckets; ++bucket) {
    // The bucket's largest word gives its largest uniform (UniformOpen01
    // reads the top 23 bits), and the noise grows with the uniform.
    const uint32_t last_bits = ((bucket + 1) << kGumbelBoundShift) - 1;
    const double u = (static_cast<double>(last_bits >> 9) + 0.5) / 8388608.0;
    const double noise = -std::log(-std::log(u)) + kGumbelFloatErrorMargin;
    bounds[bucket] = std::nextafter(static_cast<float>(noise), INFINITY);
  }
  return bounds;
}

using GumbelCandidatesFn = decltype(SimdKernels::gumbel_candidates);

int32_t GumbelMaxDrawWith(GumbelCandidatesFn gumbel_candidates, absl::Span<const float> logits,
                          int32_t argmax, uint32_t min_key, float max_logit, float inv_t,
                          uint64_t seed, uint64_t sample_index) {
  // fma, as the CUDA kernel computes (x - max) * inv_t + gumbel.
  auto score_of = [&](float x, float gumbel) { return std::fma(x - max_logit, inv_t, gumbel); };
  auto noise_of = [&](size_t i) {
    return GumbelNoise(PhiloxDraws(seed, sample_index, i / 4).v[i % 4]);
  };
  // Start from the argmax token's score: a bound most tokens cannot reach.
  // The bounds grow with the bucket, so the last is the largest.
  GumbelScan scan = {.bounds = GumbelNoiseBounds(),
                     .largest_bound = GumbelNoiseBounds()[kGumbelBoundBuckets - 1],
                     .seed = seed,
                     .stream = sample_index,
                     .min_key = min_key,
                     .max_logit = max_logit,
                     .inv_t = inv_t,
                     .best_score = score_of(max_logit, noise_of(argmax))};
  int32_t best_id = argmax;
  // Chunks, so that the scan's bound tightens as better scores turn up.
  uint32_t candidates[kGumbelDrawChunk];
  for (size_t begin = 0; begin < logits.size(); begin += kGumbelDrawChunk) {
    const size_t n = std::min(kGumbelDrawChunk, logits.size() - begin);
    const size_t count = gumbel_candidates(logits.data() + begin, n, begin, scan, candidates);
    for (size_t c = 0; c < count; ++c) {
      const size_t i = begin + candidates[c];
      const float score = score_of(logits[i], noise_of(i));
      const int32_t id = static_cast<int32_t>(i);
      if (score > scan.best_score || (score == scan.best_score && id < best_id)) {
        scan.best_score = score;
        best_id = id;
      }
    }
  }
  return best_id;
}

}  // namespace

float GumbelNoise(uint32_t bits) { return -std::log(-std::log(UniformOpen01(bits))); }

const float* GumbelNoiseBounds() {
  static const std::array<float, kGumbelBoundBuckets> bounds = MakeGumbelNoiseBounds();
  return bounds.data();
}

int32_t GumbelMaxDraw(absl::Span<const float> logits, int32_t argmax, uint32_t min_key,
                      float max_logit, float inv_t, uint64_t seed, uint64_t sample_index) {
  static const auto gumbel_candidates = BestSimdKernels().gumbel_candidates;
  return GumbelMaxDrawWith(gumbel_candidates, logits, argmax, min_key, max_logit, inv_t, seed,
                           sample_index);
}

int32_t GumbelMaxDraw(absl::Span<const float> logits, int32_t argmax, uint32_t min_key,
                      float max_logit, float inv_t, uint64_t seed, uint64_t sample_index,
                      SimdLevel level) {
  return GumbelMaxDrawWith(SimdKernelsFor(level).gumbel_candidates, logits, argmax, min_key,
                           max_logit, inv_t, seed, sample_index);
}

}  // namespace pagoda::worker
