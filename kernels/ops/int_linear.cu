// Weight-only int4/int8 kernels (kernels/ops/int_linear.h).
//
// The GEMV is read-bound at batch 1: each warp streams one output row's
// packed codes in 16-byte vectors (a warp's loads coalesce into 512 bytes)
// and turns each code into q - zero with one OR and one FADD (2^23 + q read
// as a float, minus 2^23 + zero: exact for integer codes and zeros), then
// accumulates x * (q - zero) over a vector and multiplies by the group's
// scale once a vector when a vector lies in one group (group sizes that are
// multiples of 32 inputs for int4, 16 for int8: every real checkpoint).
// Other group sizes take a per-element path (tests' odd sizes).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/ops/dispatch.cuh"
#include "kernels/ops/int_linear.h"

namespace pagoda::kernels {
namespace {

constexpr int kGemvWarps = 4;         // output features a block
constexpr float kMagic = 8388608.0f;  // 2^23: floats there step by 1

// q - zero_plus_magic + 2^23 = q - zero, exact for q < 2^23.
__device__ __forceinline__ float CodeMinusZero(uint32_t code, float zero_plus_magic) {
  return __int_as_float(static_cast<int>(code | 0x4B000000u)) - zero_plus_magic;
}

// kN consecutive inputs of a row from sorted input j; inputs at or past
// `in` read as 0 (their codes are padding). `vector` says the whole span is
// in range and 16-byte (kN = 8) or 8-byte (kN = 4) aligned.
template <typename T, int kN>
__device__ __forceinline__ void LoadInputs(const T* row, int64_t j, int64_t in, bool vector,
                                           float* out) {
  static_assert(sizeof(T) == 2 && (kN == 8 || kN == 4));
  if (vector) {
    alignas(16) T values[kN];
    if constexpr (kN == 8) {
      *reinterpret_cast<uint4*>(values) = *reinterpret_cast<const uint4*>(row + j);
    } else {
      *reinterpret_cast<uint2*>(values) = *reinterpret_cast<const uint2*>(row + j);
    }
#pragma unroll
    for (int e = 0; e < kN; ++e) out[e] = ToFloat(values[e]);
    return;
  }
#pragma unroll
  for (int e = 0; e < kN; ++e) out[e] = j + e < in ? ToFloat(row[j + e]) : 0.0f;
}

// One warp per output feature o; lane l takes the row's 16-byte vectors
// l, l + 32, ... kOneGroup: every vector lies in one group run.
template <typename T, int kBits, int kRows, bool kOneGroup>
__global__ void IntGemvKernel(PackedIntWeight w, const T* __restrict__ x,
                              const float* __restrict__ bias, T* __restrict__ y, bool x_vectors) {
  constexpr int kPerWord = 32 / kBits;
  constexpr uint32_t kMask = (1u << kBits) - 1u;
  const int lane = threadIdx.x % 32;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kGemvWarps + threadIdx.x / 32;
  if (o >= w.out) return;
  const int64_t vectors = w.words_per_row / 4;
  const uint4* codes = reinterpret_cast<const uint4*>(w.codes + o * w.words_per_row);
  const float2* scale_zero = w.scale_zero + o * w.runs;
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;

  for (int64_t v = lane; v < vectors; v += 32) {
    const uint4 packed = __ldg(codes + v);
    const uint32_t words[4] = {packed.x ^ w.code_xor, packed.y ^ w.code_xor, packed.z ^ w.code_xor,
                               packed.w ^ w.code_xor};
    const int64_t j0 = v * 4 * kPerWord;
    const bool vector = x_vectors && j0 + 4 * kPerWord <= w.in;
    float part[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) part[r] = 0.0f;
    float2 sz = kOneGroup ? scale_zero[j0 / w.group_size] : make_float2(0.0f, 0.0f);
    const float zero_plus_magic = kMagic + sz.y;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t j = j0 + k * kPerWord;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        float xs[kPerWord];
        LoadInputs<T, kPerWord>(x + r * w.in, j, w.in, vector, xs);
#pragma unroll
        for (int e = 0; e < kPerWord; ++e) {
          const uint32_t code = (words[k] >> (kBits * e)) & kMask;
          if constexpr (kOneGroup) {
            part[r] = fmaf(xs[e], CodeMinusZero(code, zero_plus_magic), part[r]);
          } else {
            const float2 g = j + e < w.in ? scale_zero[(j + e) / w.group_size] : sz;
            part[r] = fmaf(xs[e], (static_cast<float>(code) - g.y) * g.x, part[r]);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      acc[r] = kOneGroup ? fmaf(part[r], sz.x, acc[r]) : acc[r] + part[r];
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float sum = acc[r];
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0) y[r * w.out + o] = FromFloat<T>(sum + (bias != nullptr ? bias[o] : 0.0f));
  }
}

template <typename T, int kBits, int kRows>
cudaError_t LaunchGemvRows(const IntGemvParams& p, cudaStream_t stream) {
  const bool one_group = p.weight.group_size % (4 * (32 / kBits)) == 0;
  const bool x_vectors = p.weight.in % 8 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
  const dim3 grid(static_cast<unsigned>((p.weight.out + kGemvWarps - 1) / kGemvWarps));
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  if (one_group) {
    IntGemvKernel<T, kBits, kRows, true>
        <<<grid, kGemvWarps * 32, 0, stream>>>(p.weight, x, p.bias, y, x_vectors);
  } else {
    IntGemvKernel<T, kBits, kRows, false>
        <<<grid, kGemvWarps * 32, 0, stream>>>(p.weight, x, p.bias, y, x_vectors);
  }
  return cudaGetLastError();
}

template <typename T, int kBits>
cudaError_t LaunchGemvBits(const IntGemvParams& p, cudaStream_t stream) {
  switch (p.rows) {
    case 1:
      return LaunchGemvRows<T, kBits, 1>(p, stream);
    case 2:
      return LaunchGemvRows<T, kBits, 2>(p, stream);
    case 3:
      return LaunchGemvRows<T, kBits, 3>(p, stream);
    case 4:
      return LaunchGemvRows<T, kBits, 4>(p, stream);
    case 5:
      return LaunchGemvRows<T, kBits, 5>(p, stream);
    case 6:
      return LaunchGemvRows<T, kBits, 6>(p, stream);
    case 7:
      return LaunchGemvRows<T, kBits, 7>(p, stream);
    case 8:
      return LaunchGemvRows<T, kBits, 8>(p, stream);
  }
  return cudaErrorInvalidValue;
}

bool ValidPackedWeight(const PackedIntWeight& w) {
  const int64_t per_vector = 4 * (32 / (w.bits == 8 ? 8 : 4));
  return (w.bits == 4 || w.bits == 8) && w.codes != nullptr && w.scale_zero != nullptr &&
         w.out > 0 && w.in > 0 && w.group_size > 0 &&
         w.runs == (w.in + w.group_size - 1) / w.group_size &&
         w.words_per_row == (w.in + per_vector - 1) / per_vector * 4 &&
         reinterpret_cast<uintptr_t>(w.codes) % 16 == 0 &&
         (w.code_xor == 0 || (w.bits == 8 && w.code_xor == 0x80808080u));
}

bool HalfType(ScalarType dtype) { return dtype == ScalarType::kBF16 || dtype == ScalarType::kF16; }

// One thread per packed word: its codes dequantized into w's row, at the
// checkpoint's input positions.
template <typename T, int kBits>
__global__ void DequantizeIntKernel(PackedIntWeight w, T* __restrict__ out) {
  constexpr int kPerWord = 32 / kBits;
  constexpr uint32_t kMask = (1u << kBits) - 1u;
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= w.out * w.words_per_row) return;
  const int64_t o = index / w.words_per_row;
  const uint32_t word = w.codes[index] ^ w.code_xor;
  const int64_t j0 = (index % w.words_per_row) * kPerWord;
#pragma unroll
  for (int e = 0; e < kPerWord; ++e) {
    const int64_t j = j0 + e;
    if (j >= w.in) break;
    const float2 sz = w.scale_zero[o * w.runs + j / w.group_size];
    const float value = (static_cast<float>((word >> (kBits * e)) & kMask) - sz.y) * sz.x;
    const int64_t column = w.perm != nullptr ? w.perm[j] : j;
    out[o * w.in + column] = FromFloat<T>(value);
  }
}

template <typename T>
__global__ void PermuteInputsKernel(const T* __restrict__ x, const int32_t* __restrict__ perm,
                                    int64_t rows, int64_t in, T* __restrict__ sorted) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= rows * in) return;
  const int64_t r = index / in;
  sorted[index] = x[r * in + perm[index % in]];
}

// One block per row: the row's max |x| (and whether any input is not
// finite), then its codes.
template <typename T>
__global__ void QuantizeInt8RowsKernel(const T* __restrict__ x, int64_t cols, T* __restrict__ codes,
                                       float* __restrict__ scales) {
  __shared__ float block_max[32];
  __shared__ int block_bad[32];
  const T* row = x + blockIdx.x * cols;
  float amax = 0.0f;
  int bad = 0;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    const float value = ToFloat(row[i]);
    bad |= !isfinite(value);
    amax = fmaxf(amax, fabsf(value));
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    bad |= __shfl_xor_sync(0xffffffffu, bad, offset);
  }
  if (threadIdx.x % 32 == 0) {
    block_max[threadIdx.x / 32] = amax;
    block_bad[threadIdx.x / 32] = bad;
  }
  __syncthreads();
  amax = 0.0f;
  bad = 0;
  for (int k = 0; k < static_cast<int>(blockDim.x / 32); ++k) {
    amax = fmaxf(amax, block_max[k]);
    bad |= block_bad[k];
  }
  const float scale = bad ? __int_as_float(0x7fc00000) : __fdiv_rn(amax, 127.0f);
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
  T* out = codes + blockIdx.x * cols;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    float q = 0.0f;
    if (!bad && scale > 0.0f)
      q = fminf(fmaxf(rintf(__fdiv_rn(ToFloat(row[i]), scale)), -128.0f), 127.0f);
    out[i] = FromFloat<T>(q);
  }
}

unsigned BlocksOf(int64_t count, int threads) {
  return static_cast<unsigned>((count + threads - 1) / threads);
}

}  // namespace

cudaError_t LaunchIntGemv(const IntGemvParams& p, cudaStream_t stream) {
  if (!ValidPackedWeight(p.weight) || p.x == nullptr || p.y == nullptr || p.rows < 1 ||
      p.rows > kIntGemvMaxRows || !HalfType(p.dtype)) {
    return cudaErrorInvalidValue;
  }
  return DispatchScalarType(p.dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    if constexpr (sizeof(T) != 2) {
      return cudaErrorInvalidValue;
    } else {
      return p.weight.bits == 4 ? LaunchGemvBits<T, 4>(p, stream) : LaunchGemvBits<T, 8>(p, stream);
    }
  });
}

cudaError_t LaunchDequantizeIntWeight(const PackedIntWeight& weight, ScalarType dtype, void* w,
                                      cudaStream_t stream) {
  if (!ValidPackedWeight(weight) || w == nullptr || !HalfType(dtype)) return cudaErrorInvalidValue;
  return DispatchScalarType(dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    constexpr int kThreads = 256;
    const unsigned blocks = BlocksOf(weight.out * weight.words_per_row, kThreads);
    if (weight.bits == 4) {
      DequantizeIntKernel<T, 4><<<blocks, kThreads, 0, stream>>>(weight, static_cast<T*>(w));
    } else {
      DequantizeIntKernel<T, 8><<<blocks, kThreads, 0, stream>>>(weight, static_cast<T*>(w));
    }
    return cudaGetLastError();
  });
}

cudaError_t LaunchPermuteIntInputs(const void* x, const int32_t* perm, int64_t rows, int64_t in,
                                   ScalarType dtype, void* sorted, cudaStream_t stream) {
  if (x == nullptr || perm == nullptr || sorted == nullptr || rows < 0 || in <= 0 ||
      !HalfType(dtype)) {
    return cudaErrorInvalidValue;
  }
  if (rows == 0) return cudaSuccess;
  return DispatchScalarType(dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    constexpr int kThreads = 256;
    PermuteInputsKernel<T><<<BlocksOf(rows * in, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(x), perm, rows, in, static_cast<T*>(sorted));
    return cudaGetLastError();
  });
}

cudaError_t LaunchQuantizeInt8Rows(const QuantizeInt8RowsParams& p, cudaStream_t stream) {
  if (p.x == nullptr || p.codes == nullptr || p.scales == nullptr || p.rows < 0 || p.cols <= 0 ||
      !HalfType(p.dtype)) {
    return cudaErrorInvalidValue;
  }
  if (p.rows == 0) return cudaSuccess;
  return DispatchScalarType(p.dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    QuantizeInt8RowsKernel<T><<<static_cast<unsigned>(p.rows), 256, 0, stream>>>(
        static_cast<const T*>(p.x), p.cols, static_cast<T*>(p.codes), p.scales);
    return cudaGetLastError();
  });
}

}  // namespace pagoda::kernels
