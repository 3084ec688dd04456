#include <algorithm>
#include <cstdint>

#include "kernels/alignment.h"
#include "kernels/ops/dispatch.cuh"
#include "kernels/ops/rms_norm.h"
#include "kernels/ops/vec16.cuh"

namespace pagoda::kernels {
namespace {

constexpr int kThreads = 512;

// One thread block per token. The row is read twice (the second time from
// L1/L2): hidden sizes up to 16k would not fit registers at one pass.
template <typename T>
__global__ void RmsNormKernel(const T* input, int64_t input_stride, const T* __restrict__ weight,
                              T* out, int hidden, float epsilon) {
  const T* row = input + blockIdx.x * input_stride;
  float sum_squares = 0.0f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    const float x = ToFloat(row[i]);
    sum_squares += x * x;
  }
  const float scale = rsqrtf(BlockSum(sum_squares) / hidden + epsilon);
  T* out_row = out + static_cast<int64_t>(blockIdx.x) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    out_row[i] = FromFloat<T>(ToFloat(row[i]) * scale * ToFloat(weight[i]));
  }
}

// kSeparateOut: the normed row goes to `out` and `input` is only read (one
// launch where the in-place form needed a copy of the input first); else
// `out` is unused and the row is normed into `input`.
template <typename T, bool kSeparateOut>
__global__ void FusedAddRmsNormKernel(T* __restrict__ input, T* __restrict__ residual,
                                      const T* __restrict__ weight, T* __restrict__ out, int hidden,
                                      float epsilon) {
  T* normed = kSeparateOut ? out : input;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * hidden;
  float sum_squares = 0.0f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    // Norm the rounded sum, as the unfused "add then norm" would.
    const T sum = FromFloat<T>(ToFloat(input[base + i]) + ToFloat(residual[base + i]));
    residual[base + i] = sum;
    const float x = ToFloat(sum);
    sum_squares += x * x;
  }
  // BlockSum's barriers also order the residual writes before the reads below
  // (each thread reads back only what it wrote, so this is belt and braces).
  const float scale = rsqrtf(BlockSum(sum_squares) / hidden + epsilon);
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    normed[base + i] = FromFloat<T>(ToFloat(residual[base + i]) * scale * ToFloat(weight[i]));
  }
}

// The decode-time shape (a few rows of 4096): 16-byte accesses, and the row
// kept in registers between the two passes, so each byte moves once. Up to
// kMaxVecsPerThread 16-byte vectors per thread (hidden <= 16384 for 16-bit
// types); larger or unaligned rows take FusedAddRmsNormKernel.
constexpr int kMaxVecsPerThread = 4;

template <typename T, bool kSeparateOut>
__global__ void FusedAddRmsNormVecKernel(T* __restrict__ input, T* __restrict__ residual,
                                         const T* __restrict__ weight, T* __restrict__ out,
                                         int hidden, float epsilon) {
  using V = Vec16<T>;
  V* out_row = reinterpret_cast<V*>((kSeparateOut ? out : input) +
                                    static_cast<int64_t>(blockIdx.x) * hidden);
  const int num_vecs = hidden / V::kSize;
  V* input_row = reinterpret_cast<V*>(input + static_cast<int64_t>(blockIdx.x) * hidden);
  V* residual_row = reinterpret_cast<V*>(residual + static_cast<int64_t>(blockIdx.x) * hidden);
  V sums[kMaxVecsPerThread];
  float sum_squares = 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxVecsPerThread; ++j) {
    const int index = threadIdx.x + j * blockDim.x;
    if (index >= num_vecs) break;
    const V x = input_row[index];
    const V r = residual_row[index];
#pragma unroll
    for (int e = 0; e < V::kSize; ++e) {
      // Norm the rounded sum, as the unfused "add then norm" would.
      sums[j].v[e] = FromFloat<T>(ToFloat(x.v[e]) + ToFloat(r.v[e]));
      const float value = ToFloat(sums[j].v[e]);
      sum_squares += value * value;
    }
    residual_row[index] = sums[j];
  }
  const float scale = rsqrtf(BlockSum(sum_squares) / hidden + epsilon);
  const V* weight_vecs = reinterpret_cast<const V*>(weight);
#pragma unroll
  for (int j = 0; j < kMaxVecsPerThread; ++j) {
    const int index = threadIdx.x + j * blockDim.x;
    if (index >= num_vecs) break;
    const V w = weight_vecs[index];
    V out;
#pragma unroll
    for (int e = 0; e < V::kSize; ++e) {
      out.v[e] = FromFloat<T>(ToFloat(sums[j].v[e]) * scale * ToFloat(w.v[e]));
    }
    out_row[index] = out;
  }
}

// Threads for the vector kernel, or 0 when the row does not suit it (not a
// whole number of aligned vectors, or more than the registers hold).
template <typename T>
int VecThreadsFor(const FusedAddRmsNormParams& p) {
  constexpr int kSize = Vec16<T>::kSize;
  if (p.hidden % kSize != 0 || !Aligned16(p.input) || !Aligned16(p.residual) ||
      !Aligned16(p.weight) || (p.out != nullptr && !Aligned16(p.out))) {
    return 0;
  }
  const int num_vecs = p.hidden / kSize;
  const int threads = std::min(kThreads, ((num_vecs + 31) / 32) * 32);
  return num_vecs <= threads * kMaxVecsPerThread ? threads : 0;
}

int ThreadsFor(int hidden) {
  const int rounded = ((hidden + 31) / 32) * 32;
  return rounded < kThreads ? rounded : kThreads;
}

}  // namespace

cudaError_t LaunchRmsNorm(const RmsNormParams& p, cudaStream_t stream) {
  if (p.num_tokens < 0 || p.hidden <= 0 || p.input_stride < p.hidden || p.input == nullptr ||
      p.weight == nullptr || p.out == nullptr || (p.out == p.input && p.input_stride != p.hidden)) {
    return cudaErrorInvalidValue;
  }
  if (p.num_tokens == 0) return cudaSuccess;
  return DispatchScalarType(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    RmsNormKernel<T><<<p.num_tokens, ThreadsFor(p.hidden), 0, stream>>>(
        static_cast<const T*>(p.input), p.input_stride, static_cast<const T*>(p.weight),
        static_cast<T*>(p.out), p.hidden, p.epsilon);
    return cudaGetLastError();
  });
}

template <typename T, bool kSeparateOut>
cudaError_t LaunchFusedAddRmsNormAs(const FusedAddRmsNormParams& p, cudaStream_t stream) {
  if (const int threads = VecThreadsFor<T>(p); threads > 0) {
    FusedAddRmsNormVecKernel<T, kSeparateOut><<<p.num_tokens, threads, 0, stream>>>(
        static_cast<T*>(p.input), static_cast<T*>(p.residual), static_cast<const T*>(p.weight),
        static_cast<T*>(p.out), p.hidden, p.epsilon);
    return cudaGetLastError();
  }
  FusedAddRmsNormKernel<T, kSeparateOut><<<p.num_tokens, ThreadsFor(p.hidden), 0, stream>>>(
      static_cast<T*>(p.input), static_cast<T*>(p.residual), static_cast<const T*>(p.weight),
      static_cast<T*>(p.out), p.hidden, p.epsilon);
  return cudaGetLastError();
}

cudaError_t LaunchFusedAddRmsNorm(const FusedAddRmsNormParams& p, cudaStream_t stream) {
  if (p.num_tokens < 0 || p.hidden <= 0 || p.input == nullptr || p.residual == nullptr ||
      p.weight == nullptr || p.out == p.residual) {
    return cudaErrorInvalidValue;
  }
  if (p.num_tokens == 0) return cudaSuccess;
  const bool separate_out = p.out != nullptr && p.out != p.input;
  return DispatchScalarType(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return separate_out ? LaunchFusedAddRmsNormAs<T, true>(p, stream)
                        : LaunchFusedAddRmsNormAs<T, false>(p, stream);
  });
}

}  // namespace pagoda::kernels
