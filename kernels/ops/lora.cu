#include "kernels/ops/dispatch.cuh"
#include "kernels/ops/lora.h"

namespace pagoda::kernels {
namespace {

constexpr int kLoraShrinkWarps = 8;  // Ranks per shrink block: one warp each.
constexpr int kLoraExpandThreads = 256;

// The launch's weights of token `t`'s group, or null when the launch leaves
// the token alone.
__device__ __forceinline__ const LoraGroupWeights* LoraGroupOf(const LoraParams& p, int t) {
  const int g = p.row_group[t] - p.first_group;
  if (g < 0 || g >= p.num_groups || p.groups[g].rank == 0) return nullptr;
  return &p.groups[g];
}

// Grid (tokens, rank tiles of kLoraShrinkWarps): warp w of tile y computes rank
// k = y * kLoraShrinkWarps + w of its token, lanes striding over `in`.
template <typename T>
__global__ void LoraShrinkKernel(const LoraParams p) {
  const int t = blockIdx.x;
  const LoraGroupWeights* w = LoraGroupOf(p, t);
  if (w == nullptr) return;
  const int k = blockIdx.y * kLoraShrinkWarps + threadIdx.x / 32;
  if (k >= w->rank) return;
  const int lane = threadIdx.x % 32;
  const T* x = static_cast<const T*>(p.x) + static_cast<int64_t>(t) * p.in;
  const T* a = static_cast<const T*>(w->a) + static_cast<int64_t>(k) * p.in;
  float sum = 0;
  for (int64_t i = lane; i < p.in; i += 32) sum += ToFloat(a[i]) * ToFloat(x[i]);
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) p.scratch[static_cast<int64_t>(t) * p.scratch_stride + k] = w->scale * sum;
}

// Grid (tokens, output tiles): the token's rank vector is staged in shared
// memory, then each thread adds one output's Σ_k v[k] · Bᵀ[k, o] (a warp
// reads a row of Bᵀ contiguously).
template <typename T>
__global__ void LoraExpandKernel(const LoraParams p) {
  __shared__ float v[kLoraMaxRank];
  const int t = blockIdx.x;
  const LoraGroupWeights* w = LoraGroupOf(p, t);
  if (w == nullptr) return;  // The whole block leaves: no barrier is skipped.
  const float* scratch = p.scratch + static_cast<int64_t>(t) * p.scratch_stride;
  for (int k = threadIdx.x; k < w->rank; k += blockDim.x) v[k] = scratch[k];
  __syncthreads();
  const int64_t o = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (o >= p.out) return;
  const T* b_t = static_cast<const T*>(w->b_t) + o;
  float sum = 0;
  for (int k = 0; k < w->rank; ++k) sum += v[k] * ToFloat(b_t[static_cast<int64_t>(k) * p.out]);
  T* y = static_cast<T*>(p.y) + static_cast<int64_t>(t) * p.y_stride + o;
  *y = FromFloat<T>(ToFloat(*y) + sum);
}

bool ValidLoraParams(const LoraParams& p, int* max_rank) {
  if (p.num_tokens < 0 || p.in <= 0 || p.out <= 0 || p.y_stride < p.out || p.num_groups < 0 ||
      p.num_groups > kLoraGroupsPerLaunch || p.scratch_stride <= 0) {
    return false;
  }
  if (p.num_tokens > 0 &&
      (p.x == nullptr || p.y == nullptr || p.row_group == nullptr || p.scratch == nullptr)) {
    return false;
  }
  *max_rank = 0;
  for (int g = 0; g < p.num_groups; ++g) {
    const LoraGroupWeights& w = p.groups[g];
    if (w.rank < 0 || w.rank > kLoraMaxRank || w.rank > p.scratch_stride) return false;
    if (w.rank > 0 && (w.a == nullptr || w.b_t == nullptr)) return false;
    if (w.rank > *max_rank) *max_rank = w.rank;
  }
  return true;
}

}  // namespace

cudaError_t LaunchLora(const LoraParams& p, cudaStream_t stream) {
  int max_rank = 0;
  if (!ValidLoraParams(p, &max_rank)) return cudaErrorInvalidValue;
  if (p.num_tokens == 0 || max_rank == 0) return cudaSuccess;
  return DispatchScalarType(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const dim3 shrink_grid(p.num_tokens, (max_rank + kLoraShrinkWarps - 1) / kLoraShrinkWarps);
    LoraShrinkKernel<T><<<shrink_grid, kLoraShrinkWarps * 32, 0, stream>>>(p);
    if (cudaError_t error = cudaGetLastError(); error != cudaSuccess) return error;
    const dim3 expand_grid(
        p.num_tokens, static_cast<unsigned>((p.out + kLoraExpandThreads - 1) / kLoraExpandThreads));
    LoraExpandKernel<T><<<expand_grid, kLoraExpandThreads, 0, stream>>>(p);
    return cudaGetLastError();
  });
}

}  // namespace pagoda::kernels
