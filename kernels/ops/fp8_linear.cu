#include <algorithm>
#include <cmath>

#include "kernels/fp8_conversion.cuh"
#include "kernels/ops/dispatch.cuh"
#include "kernels/ops/fp8_linear.h"

namespace pagoda::kernels {
namespace {

constexpr int kFp8QuantizeThreads = 256;
constexpr float kFp8LinearE4M3Max = 448.0f;

// max|row| over the thread block, and whether any element is NaN (fmaxf
// drops NaNs, so they are counted apart). Every thread gets both.
template <typename T>
__device__ void Fp8RowAbsMax(const T* row, int64_t cols, float* amax, bool* any_nan) {
  __shared__ float warp_max[kFp8QuantizeThreads / 32];
  float local = 0.0f;
  bool nan = false;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    const float value = ToFloat(row[i]);
    local = fmaxf(local, fabsf(value));
    nan |= isnan(value);
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    local = fmaxf(local, __shfl_xor_sync(0xffffffffu, local, offset));
  }
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = local;
  *any_nan = __syncthreads_or(nan) != 0;  // also orders warp_max's writes
  float block = 0.0f;
  for (int w = 0; w < kFp8QuantizeThreads / 32; ++w) block = fmaxf(block, warp_max[w]);
  *amax = block;
}

template <typename T>
__global__ void __launch_bounds__(kFp8QuantizeThreads)
    QuantizeFp8RowsKernel(const T* __restrict__ x, int64_t x_row_stride, int64_t cols,
                          bool per_token, float static_scale, uint8_t* __restrict__ codes,
                          float* __restrict__ scales) {
  const int64_t r = blockIdx.x;
  const T* row = x + r * x_row_stride;
  float scale = static_scale;
  if (per_token) {
    float amax;
    bool any_nan;
    Fp8RowAbsMax(row, cols, &amax, &any_nan);
    scale = any_nan ? __int_as_float(0x7fffffff)
                    : fmaxf(__fdiv_rn(amax, kFp8LinearE4M3Max), kMinFp8TokenScale);
  }
  if (threadIdx.x == 0) scales[r] = scale;
  uint8_t* out = codes + r * cols;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    out[i] = FloatToE4M3(__fdiv_rn(ToFloat(row[i]), scale));
  }
}

template <typename T>
__global__ void ScaleFp8OutputKernel(const float* __restrict__ acc,
                                     const float* __restrict__ row_scales,
                                     const float* __restrict__ col_scales,
                                     const float* __restrict__ bias, T* __restrict__ y,
                                     int64_t y_row_stride, int64_t rows, int64_t cols) {
  const int64_t total = rows * cols;
  for (int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; index < total;
       index += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = index / cols;
    const int64_t o = index % cols;
    float value = __fmul_rn(acc[index], __fmul_rn(row_scales[r], col_scales[o]));
    if (bias != nullptr) value = __fadd_rn(value, bias[o]);
    y[r * y_row_stride + o] = FromFloat<T>(value);
  }
}

}  // namespace

cudaError_t LaunchQuantizeFp8Rows(const QuantizeFp8RowsParams& p, cudaStream_t stream) {
  const bool static_ok = p.scaling == Fp8InputScaling::kPerToken ||
                         (std::isfinite(p.static_scale) && p.static_scale > 0.0f);
  if (p.rows < 0 || p.cols < 0 || p.x_row_stride < p.cols || !static_ok || p.rows > 0x7fffffff ||
      (p.rows > 0 && (p.x == nullptr || p.codes == nullptr || p.scales == nullptr))) {
    return cudaErrorInvalidValue;
  }
  if (p.rows == 0) return cudaSuccess;
  return DispatchScalarType(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    QuantizeFp8RowsKernel<T><<<static_cast<unsigned>(p.rows), kFp8QuantizeThreads, 0, stream>>>(
        static_cast<const T*>(p.x), p.x_row_stride, p.cols, p.scaling == Fp8InputScaling::kPerToken,
        p.static_scale, p.codes, p.scales);
    return cudaGetLastError();
  });
}

cudaError_t LaunchScaleFp8Output(const ScaleFp8OutputParams& p, cudaStream_t stream) {
  if (p.rows < 0 || p.cols < 0 || p.y_row_stride < p.cols ||
      (p.rows > 0 && p.cols > 0 &&
       (p.acc == nullptr || p.row_scales == nullptr || p.col_scales == nullptr ||
        p.y == nullptr))) {
    return cudaErrorInvalidValue;
  }
  const int64_t total = p.rows * p.cols;
  if (total == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, 65535 * 8);
  return DispatchScalarType(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ScaleFp8OutputKernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        p.acc, p.row_scales, p.col_scales, p.bias, static_cast<T*>(p.y), p.y_row_stride, p.rows,
        p.cols);
    return cudaGetLastError();
  });
}

}  // namespace pagoda::kernels
