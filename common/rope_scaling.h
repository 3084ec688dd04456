#ifndef PAGODA_COMMON_ROPE_SCALING_H_
#define PAGODA_COMMON_ROPE_SCALING_H_

// The one description of rotary-embedding frequency scaling, as Hugging
// Face's `rope_scaling` keys: read from config.json (common/model_config.h),
// turned into tables by kernels/ops/rope_cache.h. Dependency-free, like
// common/dtype_enum.h, so the CUDA kernels' tests include it too.

namespace pagoda {

struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 };
  Type type = Type::kNone;
  double factor = 1.0;
  // llama3 only.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
};

// Rotary positions a worker tabulates at load. Bounded so a 128k-context
// config does not spend memory on positions no request reaches: the CPU
// computes later positions per step; the CUDA rotary kernel reads only the
// table, so this is also the longest context CUDA serves.
inline constexpr int kMaxRopeTablePositions = 16384;

}  // namespace pagoda

#endif  // PAGODA_COMMON_ROPE_SCALING_H_
