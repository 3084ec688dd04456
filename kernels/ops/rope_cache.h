#ifndef PAGODA_KERNELS_OPS_ROPE_CACHE_H_
#define PAGODA_KERNELS_OPS_ROPE_CACHE_H_

// Host-side rotary-embedding tables: inverse frequencies with Hugging Face's
// `linear` and `llama3` scaling, and the cos/sin cache the rotary kernel reads.
// Pure functions, no CUDA: the one builder of these tables, used by the CPU
// model (worker/llama_model.cc), the CUDA backend and the kernels' tests.

#include <vector>

#include "common/rope_scaling.h"

namespace pagoda::kernels {

// The project's one description of rope scaling (common/rope_scaling.h),
// under the name the kernels and their tests use.
using RopeFrequencyScaling = ::pagoda::RopeScaling;

// inv_freq[i] = theta^(-2i / rotary_dim) for i in [0, rotary_dim / 2), then
// the scaling: llama3 as HF `_compute_llama3_parameters` (wavelengths longer
// than original_max / low_freq_factor are divided by `factor`, shorter than
// original_max / high_freq_factor kept, and those between blended smoothly);
// linear divides every frequency by `factor` (HF divides positions instead:
// the same angles, so positions past a table are computed from inv_freq
// alone).
// REQUIRES: rotary_dim even and > 0, theta > 0, factor > 0.
std::vector<double> ComputeRopeInvFreq(int rotary_dim, double theta,
                                       const RopeFrequencyScaling& scaling);

// float [max_position, rotary_dim]: row p = cos(p * inv_freq[0..half)) then
// sin(p * inv_freq[0..half)), inv_freq from ComputeRopeInvFreq (scaling
// applied). Angles are computed in double and rounded once.
std::vector<float> BuildRopeCosSinCache(int max_position, const std::vector<double>& inv_freq);

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_OPS_ROPE_CACHE_H_
