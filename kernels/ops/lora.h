#ifndef PAGODA_KERNELS_OPS_LORA_H_
#define PAGODA_KERNELS_OPS_LORA_H_

// Batched LoRA (Punica's BGMV, one row at a time, each reading its own
// adapter): y[t] += scale_g · B_g (A_g x[t]) for every token t whose group
// g = row_group[t] this launch covers, in two kernels:
// - shrink: v[t, k] = scale_g · Σ_i A_g[k, i] · x[t, i], f32, k < rank_g;
// - expand: y[t, o] += Σ_k v[t, k] · Bᵀ_g[k, o].
// x, y, A and Bᵀ in the activation dtype, accumulation in f32. Rows whose
// group is outside the launch, or whose adapter has rank 0 (it leaves this
// projection alone), are not touched.

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/scalar_type.h"

namespace pagoda::kernels {

// One adapter's update of one projection, on the device.
struct LoraGroupWeights {
  const void* a = nullptr;    // [rank, in], row-major (PEFT's lora_A)
  const void* b_t = nullptr;  // [rank, out], row-major (PEFT's lora_B transposed)
  int rank = 0;               // 0: this adapter leaves the projection alone
  float scale = 0;
};

// Adapters one launch takes (passed by value, 24 bytes each); a step with
// more launches again for the next ones.
inline constexpr int kLoraGroupsPerLaunch = 32;
inline constexpr int kLoraMaxRank = 512;

struct LoraParams {
  const void* x = nullptr;  // [num_tokens, in], contiguous
  void* y = nullptr;        // rows y_stride elements apart, `out` of them updated
  int64_t in = 0;
  int64_t out = 0;
  int64_t y_stride = 0;  // >= out: a fused projection's output
  int num_tokens = 0;
  // Device [num_tokens]: each token's group (-1: none); this launch takes
  // groups [first_group, first_group + num_groups).
  const int32_t* row_group = nullptr;
  int first_group = 0;
  int num_groups = 0;
  LoraGroupWeights groups[kLoraGroupsPerLaunch];
  // Device f32 [num_tokens, scratch_stride], scratch_stride >= every rank.
  float* scratch = nullptr;
  int scratch_stride = 0;
  ScalarType dtype = ScalarType::kBF16;
};

// Both kernels on `stream`; cudaErrorInvalidValue for a bad shape, a rank
// outside [0, kLoraMaxRank] or above scratch_stride, or a null pointer.
cudaError_t LaunchLora(const LoraParams& params, cudaStream_t stream);

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_OPS_LORA_H_
