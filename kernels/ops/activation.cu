#include "kernels/ops/activation.h"
#include "kernels/ops/dispatch.cuh"

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
    SiluAndMulKernel<T><<<grid, kThreads, 0, stream>>>(static_cast<const T*>(p.input),
                                                       static_cast<T*>(p.out), p.intermediate);
    return cudaGetLastError();
  });
}

}  // namespace pagoda::kernels
