// The fused int4 prefill GEMM (kernels/ops/int_linear.h LaunchFusedIntGemm).
//
// y[rows, out] = x[rows, in] * W^T on the bf16/f16 tensor cores
// (mma.sync m16n8k16), the weight never written out: each lane reads the
// packed codes of the one output column its B fragment needs straight from
// global memory (16 bytes: 32 sorted inputs of one row), turns the four
// nibbles a k16 slice asks of it into (q - zero) * scale, rounded to the
// activation dtype as the dequantize-then-GEMM path rounds them, and feeds
// them to the MMA as registers. Activations are read as A fragments from
// global memory too (rows of a prefill chunk stay in L1/L2; act-order
// gathers them through perm). No shared memory, no block barrier.
//
// Warp tile: kMTiles x 16 rows by 16 outputs (two n8 tiles); a block is 4
// warps along the outputs (64 outputs). Each warp re-reads its 16 weight
// rows once per row tile, so the weight crosses memory ceil(rows / (16 *
// kMTiles)) times: this kernel is for prefill chunks of tens of rows, where
// the dequantized copy's write and re-read (3 x out x in x 2 bytes) costs
// more; long prompts keep the dequantize + cuBLAS path (NOTES.md).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/attention/mma_sm80.cuh"
#include "kernels/ops/dispatch.cuh"
#include "kernels/ops/int_linear.h"

namespace pagoda::kernels {
namespace {

using attention_internal::MmaM16N8K16;
using attention_internal::PackFloat2;

constexpr int kFusedWarps = 4;
constexpr int kFusedNTiles = 2;  // n8 tiles a warp
constexpr int kFusedOutputsPerBlock = kFusedWarps * kFusedNTiles * 8;

// Two consecutive sorted inputs (c, c + 1) of row r packed as a T pair;
// zero past `rows` or `in`.
template <typename T>
__device__ __forceinline__ uint32_t FusedLoadPair(const T* __restrict__ x,
                                                  const int32_t* __restrict__ perm, int64_t rows,
                                                  int64_t in, int64_t r, int64_t c) {
  if (r >= rows) return 0;
  const T* row = x + r * in;
  float lo = 0.0f, hi = 0.0f;
  if (c < in) lo = ToFloat(row[perm != nullptr ? perm[c] : c]);
  if (c + 1 < in) hi = ToFloat(row[perm != nullptr ? perm[c + 1] : c + 1]);
  return PackFloat2<T>(lo, hi);
}

// Nibbles 2t and 2t + 1 of `word` as a T pair of (q - zero) * scale.
template <typename T>
__device__ __forceinline__ uint32_t FusedDequantPair(uint32_t word, int t, float2 scale_zero) {
  const float q0 = static_cast<float>((word >> (8 * t)) & 0xFu);
  const float q1 = static_cast<float>((word >> (8 * t + 4)) & 0xFu);
  return PackFloat2<T>((q0 - scale_zero.y) * scale_zero.x, (q1 - scale_zero.y) * scale_zero.x);
}

template <typename T, int kMTiles>
__global__ void __launch_bounds__(kFusedWarps * 32)
    FusedInt4GemmKernel(PackedIntWeight w, const T* __restrict__ x, const float* __restrict__ bias,
                        T* __restrict__ y, int64_t rows) {
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t out_base =
      static_cast<int64_t>(blockIdx.x) * kFusedOutputsPerBlock + (threadIdx.x / 32) * 16;
  const int64_t row_base = static_cast<int64_t>(blockIdx.y) * 16 * kMTiles;
  const int64_t vectors = w.words_per_row / 4;  // 32 sorted inputs each

  float acc[kMTiles][kFusedNTiles][4] = {};
  for (int64_t v = 0; v < vectors; ++v) {
    // This lane's B column in each n8 tile: output out_base + 8 n + g.
    uint4 codes[kFusedNTiles];
    float2 scale_zero[kFusedNTiles];
#pragma unroll
    for (int n = 0; n < kFusedNTiles; ++n) {
      const int64_t o = out_base + 8 * n + g;
      codes[n] = make_uint4(0, 0, 0, 0);
      scale_zero[n] = make_float2(0.0f, 0.0f);
      if (o < w.out) {
        codes[n] = __ldg(reinterpret_cast<const uint4*>(w.codes + o * w.words_per_row) + v);
        scale_zero[n] = w.scale_zero[o * w.runs + v * 32 / w.group_size];
      }
    }
#pragma unroll
    for (int s = 0; s < 2; ++s) {  // the two k16 slices of the 32 inputs
      uint32_t b[kFusedNTiles][2];
#pragma unroll
      for (int n = 0; n < kFusedNTiles; ++n) {
        const uint32_t lo_word = s == 0 ? codes[n].x : codes[n].z;
        const uint32_t hi_word = s == 0 ? codes[n].y : codes[n].w;
        b[n][0] = FusedDequantPair<T>(lo_word, t, scale_zero[n]);
        b[n][1] = FusedDequantPair<T>(hi_word, t, scale_zero[n]);
      }
      const int64_t c = v * 32 + 16 * s + 2 * t;
#pragma unroll
      for (int m = 0; m < kMTiles; ++m) {
        const int64_t r0 = row_base + 16 * m + g;
        const uint32_t a[4] = {FusedLoadPair(x, w.perm, rows, w.in, r0, c),
                               FusedLoadPair(x, w.perm, rows, w.in, r0 + 8, c),
                               FusedLoadPair(x, w.perm, rows, w.in, r0, c + 8),
                               FusedLoadPair(x, w.perm, rows, w.in, r0 + 8, c + 8)};
#pragma unroll
        for (int n = 0; n < kFusedNTiles; ++n) MmaM16N8K16<T>(acc[m][n], a, b[n][0], b[n][1]);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
    for (int n = 0; n < kFusedNTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t r = row_base + 16 * m + g + (e >= 2 ? 8 : 0);
        const int64_t o = out_base + 8 * n + 2 * t + (e % 2);
        if (r < rows && o < w.out) {
          y[r * w.out + o] = FromFloat<T>(acc[m][n][e] + (bias != nullptr ? bias[o] : 0.0f));
        }
      }
    }
  }
}

template <typename T, int kMTiles>
cudaError_t LaunchFusedTiles(const IntGemmParams& p, cudaStream_t stream) {
  const int64_t row_tiles = (p.rows + 16 * kMTiles - 1) / (16 * kMTiles);
  if (row_tiles > 65535) return cudaErrorInvalidValue;
  const dim3 grid(
      static_cast<unsigned>((p.weight.out + kFusedOutputsPerBlock - 1) / kFusedOutputsPerBlock),
      static_cast<unsigned>(row_tiles));
  FusedInt4GemmKernel<T, kMTiles><<<grid, kFusedWarps * 32, 0, stream>>>(
      p.weight, static_cast<const T*>(p.x), p.bias, static_cast<T*>(p.y), p.rows);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchFusedIntGemm(const IntGemmParams& p, cudaStream_t stream) {
  const PackedIntWeight& w = p.weight;
  const bool weight_ok =
      w.bits == 4 && w.code_xor == 0 && w.codes != nullptr && w.scale_zero != nullptr &&
      w.out > 0 && w.in > 0 && w.group_size > 0 && w.group_size % 32 == 0 &&
      w.runs == (w.in + w.group_size - 1) / w.group_size &&
      w.words_per_row == (w.in + 31) / 32 * 4 && reinterpret_cast<uintptr_t>(w.codes) % 16 == 0;
  if (!weight_ok || p.x == nullptr || p.y == nullptr || p.rows < 1 ||
      (p.dtype != ScalarType::kBF16 && p.dtype != ScalarType::kF16)) {
    return cudaErrorInvalidValue;
  }
  return DispatchScalarType(p.dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    if constexpr (sizeof(T) != 2) {
      return cudaErrorInvalidValue;
    } else {
      if (p.rows <= 16) return LaunchFusedTiles<T, 1>(p, stream);
      if (p.rows <= 32) return LaunchFusedTiles<T, 2>(p, stream);
      return LaunchFusedTiles<T, 4>(p, stream);
    }
  });
}

}  // namespace pagoda::kernels
