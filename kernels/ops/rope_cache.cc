#include "kernels/ops/rope_cache.h"

#include <cmath>
#include <numbers>

namespace pagoda::kernels {

std::vector<double> ComputeRopeInvFreq(int rotary_dim, double theta,
                                       const RopeFrequencyScaling& scaling) {
  const int half = rotary_dim / 2;
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i) {
    inv_freq[i] = 1.0 / std::pow(theta, (2.0 * i) / rotary_dim);
  }
  if (scaling.type == RopeFrequencyScaling::Type::kLinear) {
    for (double& freq : inv_freq) freq /= scaling.factor;
    return inv_freq;
  }
  if (scaling.type != RopeFrequencyScaling::Type::kLlama3) return inv_freq;

  const double old_context = scaling.original_max_position_embeddings;
  const double low_freq_wavelen = old_context / scaling.low_freq_factor;
  const double high_freq_wavelen = old_context / scaling.high_freq_factor;
  for (double& freq : inv_freq) {
    const double wavelen = 2.0 * std::numbers::pi / freq;
    if (wavelen < high_freq_wavelen) continue;  // High frequency: kept.
    if (wavelen > low_freq_wavelen) {           // Low frequency: stretched.
      freq /= scaling.factor;
      continue;
    }
    const double smooth = (old_context / wavelen - scaling.low_freq_factor) /
                          (scaling.high_freq_factor - scaling.low_freq_factor);
    freq = (1.0 - smooth) * freq / scaling.factor + smooth * freq;
  }
  return inv_freq;
}

std::vector<float> BuildRopeCosSinCache(int max_position, const std::vector<double>& inv_freq) {
  const size_t half = inv_freq.size();
  std::vector<float> cache(static_cast<size_t>(max_position) * 2 * half);
  for (int p = 0; p < max_position; ++p) {
    float* row = cache.data() + static_cast<size_t>(p) * 2 * half;
    for (size_t i = 0; i < half; ++i) {
      // Angles in double: positions times frequencies lose digits in f32.
      const double angle = static_cast<double>(p) * inv_freq[i];
      row[i] = static_cast<float>(std::cos(angle));
      row[half + i] = static_cast<float>(std::sin(angle));
    }
  }
  return cache;
}

}  // namespace pagoda::kernels
