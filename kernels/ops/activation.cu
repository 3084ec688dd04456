#include "kernels/ops/activation.h"

#include "kernels/alignment.h"
#include "kernels/ops/dispatch.cuh"
#include "kernels/ops/vec16.cuh"

namespace pagoda::kernels {
namespace {

// Grid: (tokens, column tiles), so wide rows still fill the GPU at batch 1.
template <typename T>
__global__ void SiluAndMulKernel(const T* __restrict__ input, T* __restrict__ out,
                                 int intermediate) {
  const int64_t token = blockIdx.x;
  const int col = blockIdx.y * blockDim.x + threadIdx.x;
  if (col >= intermediate) return;
  const T* row = input + token * 2 * intermediate;
  const float gate = ToFloat(row[col]);
  const float up = ToFloat(row[intermediate + col]);
  out[token * intermediate + col] = FromFloat<T>(gate / (1.0f + __expf(-gate)) * up);
}

// The same with one 16-byte vector of gate, up and out per thread: at decode
// batch sizes the element-wise kernel is latency-bound (one 2-byte load
// pair per thread).
template <typename T>
__global__ void SiluAndMulVecKernel(const T* __restrict__ input, T* __restrict__ out,
                                    int intermediate) {
  using V = Vec16<T>;
  const int64_t token = blockIdx.x;
  const int vec = blockIdx.y * blockDim.x + threadIdx.x;
  if (vec >= intermediate / V::kSize) return;
  const V* row = reinterpret_cast<const V*>(input + token * 2 * intermediate);
  const V gate = row[vec];
  const V up = row[intermediate / V::kSize + vec];
  V result;
#pragma unroll
  for (int e = 0; e < V::kSize; ++e) {
    const float g = ToFloat(gate.v[e]);
    result.v[e] = FromFloat<T>(g / (1.0f + __expf(-g)) * ToFloat(up.v[e]));
  }
  reinterpret_cast<V*>(out + token * intermediate)[vec] = result;
}

}  // namespace

cudaError_t LaunchSiluAndMul(const SiluAndMulParams& p, cudaStream_t stream) {
  if (p.num_tokens < 0 || p.intermediate <= 0 || p.input == nullptr || p.out == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (p.num_tokens == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const dim3 grid(p.num_tokens, (p.intermediate + kThreads - 1) / kThreads);
  return DispatchScalarType(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kSize = Vec16<T>::kSize;
    if (p.intermediate % kSize == 0 && Aligned16(p.input) && Aligned16(p.out)) {
      const dim3 vec_grid(p.num_tokens, (p.intermediate / kSize + kThreads - 1) / kThreads);
      SiluAndMulVecKernel<T><<<vec_grid, kThreads, 0, stream>>>(static_cast<const T*>(p.input),
                                                               static_cast<T*>(p.out),
                                                               p.intermediate);
      return cudaGetLastError();
    }
    SiluAndMulKernel<T><<<grid, kThreads, 0, stream>>>(static_cast<const T*>(p.input),
                                                       static_cast<T*>(p.out), p.intermediate);
    return cudaGetLastError();
  });
}

}  // namespace pagoda::kernels
