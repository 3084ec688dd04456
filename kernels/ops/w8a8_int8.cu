// W8A8 int8 activation codes and the int32 product's epilogue
// (kernels/ops/w8a8_int8.h).

#include <algorithm>

#include "kernels/ops/dispatch.cuh"
#include "kernels/ops/w8a8_int8.h"

namespace pagoda::kernels {
namespace {

constexpr int kInt8CodeThreads = 256;

// Block-wide max |x| over the row and whether any value is not finite;
// every thread gets both.
template <typename T>
__device__ void Int8CodesRowStats(const T* row, int64_t cols, float* amax, bool* bad) {
  __shared__ float warp_max[kInt8CodeThreads / 32];
  float local = 0.0f;
  int not_finite = 0;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    const float value = ToFloat(row[i]);
    not_finite |= !isfinite(value);
    local = fmaxf(local, fabsf(value));
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    local = fmaxf(local, __shfl_xor_sync(0xffffffffu, local, offset));
  }
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = local;
  *bad = __syncthreads_or(not_finite) != 0;  // also orders warp_max's writes
  float block = 0.0f;
  for (int w = 0; w < kInt8CodeThreads / 32; ++w) block = fmaxf(block, warp_max[w]);
  *amax = block;
}

// Block-wide int sum; every thread gets it.
__device__ int Int8CodesBlockSum(int value) {
  __shared__ int warp_sums[kInt8CodeThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  __syncthreads();  // warp_sums' readers of an earlier call are done
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = value;
  __syncthreads();
  int total = 0;
  for (int w = 0; w < kInt8CodeThreads / 32; ++w) total += warp_sums[w];
  return total;
}

template <typename T>
__global__ void __launch_bounds__(kInt8CodeThreads)
    QuantizeInt8CodesKernel(const T* __restrict__ x, int64_t rows, int64_t cols, int64_t ld,
                            int8_t* __restrict__ codes, float* __restrict__ scales,
                            int32_t* __restrict__ row_sums) {
  const int64_t r = blockIdx.x;
  int8_t* out = codes + r * ld;
  if (r >= rows) {  // GEMM row padding: zero codes
    for (int64_t i = threadIdx.x; i < ld; i += blockDim.x) out[i] = 0;
    return;
  }
  const T* row = x + r * cols;
  float amax;
  bool bad;
  Int8CodesRowStats(row, cols, &amax, &bad);
  const float scale = bad ? __int_as_float(0x7fc00000) : __fdiv_rn(amax, 127.0f);
  int sum = 0;
  for (int64_t i = threadIdx.x; i < ld; i += blockDim.x) {
    float q = 0.0f;
    if (i < cols && !bad && scale > 0.0f) {
      q = fminf(fmaxf(rintf(__fdiv_rn(ToFloat(row[i]), scale)), -128.0f), 127.0f);
    }
    out[i] = static_cast<int8_t>(q);
    sum += static_cast<int>(q);
  }
  sum = Int8CodesBlockSum(sum);
  if (threadIdx.x == 0) {
    scales[r] = scale;
    row_sums[r] = sum;
  }
}

template <typename T>
__global__ void ScaleInt32OutputKernel(const int32_t* __restrict__ acc,
                                       const int32_t* __restrict__ row_sums,
                                       const float* __restrict__ row_scales,
                                       const float2* __restrict__ col_scale_zero,
                                       const float* __restrict__ col_scales,
                                       const float* __restrict__ bias, T* __restrict__ y,
                                       int64_t y_row_stride, int64_t rows, int64_t cols) {
  const int64_t total = rows * cols;
  for (int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; index < total;
       index += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = index / cols;
    const int64_t o = index % cols;
    const int64_t offset = static_cast<int64_t>(col_scale_zero[o].y) - 128;
    const int64_t exact = static_cast<int64_t>(acc[index]) - offset * row_sums[r];
    float value = __fmul_rn(static_cast<float>(exact), __fmul_rn(row_scales[r], col_scales[o]));
    if (bias != nullptr) value = __fadd_rn(value, bias[o]);
    y[r * y_row_stride + o] = FromFloat<T>(value);
  }
}

}  // namespace

cudaError_t LaunchQuantizeInt8Codes(const QuantizeInt8CodesParams& p, cudaStream_t stream) {
  if (p.x == nullptr || p.codes == nullptr || p.scales == nullptr || p.row_sums == nullptr ||
      p.rows < 0 || p.cols <= 0 || p.ld < p.cols || p.padded_rows < p.rows ||
      p.padded_rows > 0x7fffffff || (p.dtype != ScalarType::kBF16 && p.dtype != ScalarType::kF16)) {
    return cudaErrorInvalidValue;
  }
  if (p.padded_rows == 0) return cudaSuccess;
  return DispatchScalarType(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    QuantizeInt8CodesKernel<T>
        <<<static_cast<unsigned>(p.padded_rows), kInt8CodeThreads, 0, stream>>>(
            static_cast<const T*>(p.x), p.rows, p.cols, p.ld, p.codes, p.scales, p.row_sums);
    return cudaGetLastError();
  });
}

cudaError_t LaunchScaleInt32Output(const ScaleInt32OutputParams& p, cudaStream_t stream) {
  if (p.rows < 0 || p.cols < 0 || p.y_row_stride < p.cols ||
      (p.rows > 0 && p.cols > 0 &&
       (p.acc == nullptr || p.row_sums == nullptr || p.row_scales == nullptr ||
        p.col_scale_zero == nullptr || p.col_scales == nullptr || p.y == nullptr))) {
    return cudaErrorInvalidValue;
  }
  const int64_t total = p.rows * p.cols;
  if (total == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, 65535 * 8);
  return DispatchScalarType(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ScaleInt32OutputKernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        p.acc, p.row_sums, p.row_scales, p.col_scale_zero, p.col_scales, p.bias,
        static_cast<T*>(p.y), p.y_row_stride, p.rows, p.cols);
    return cudaGetLastError();
  });
}

}  // namespace pagoda::kernels
