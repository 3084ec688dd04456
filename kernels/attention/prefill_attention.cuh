// Prefill attention kernel (causal, variable-length batch, queries after an
// optional cached prefix) over the paged KV cache, and its typed launcher.
// Included only by prefill_attention_{bf16,f16}.cu and attention_launch.cu.
//
// Tiled SIMT version (no tensor cores yet). One thread block per
// (query tile, kv head, sequence). A tile is kBlockM "rows", a row being one
// (query token, query head of the kv group) pair, so GQA heads share each K/V
// tile loaded into shared memory. Each warp owns kRowsPerWarp rows; for a row
// the 32 lanes score the 32 keys of the current K tile (one key per lane), then
// each lane accumulates head_dim / 32 output elements over those keys.
#ifndef PAGODA_KERNELS_ATTENTION_PREFILL_ATTENTION_CUH_
#define PAGODA_KERNELS_ATTENTION_PREFILL_ATTENTION_CUH_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/attention/attention_common.cuh"
#include "kernels/attention/paged_attention.h"

namespace pagoda::kernels::attention_internal {

constexpr int kPrefillWarps = 4;
constexpr int kPrefillRowsPerWarp = 16;
constexpr int kPrefillBlockM = kPrefillWarps * kPrefillRowsPerWarp;
constexpr int kPrefillBlockN = 32;  // keys per tile: one per lane

template <typename T, int kHeadDim, int kBlockSize>
__global__ void __launch_bounds__(kPrefillWarps * 32)
    PrefillAttentionKernel(PrefillAttentionParams params) {
  constexpr int kThreads = kPrefillWarps * 32;
  constexpr int kVec = 8;
  constexpr int kVecsPerRow = kHeadDim / kVec;
  constexpr int kDimsPerLane = kHeadDim / 32;  // 4 (d=128) or 2 (d=64)
  // K rows are padded by 16 bytes so that lanes reading different keys' rows
  // hit different banks.
  constexpr int kKeyStride = kHeadDim + kVec;
  static_assert(kDimsPerLane == 2 || kDimsPerLane == 4);

  __shared__ __align__(16) T q_tile[kPrefillBlockM][kHeadDim];
  __shared__ __align__(16) T k_tile[kPrefillBlockN][kKeyStride];
  __shared__ __align__(16) T v_tile[kPrefillBlockN][kHeadDim];

  const int tile = blockIdx.x;
  const int kv_head = blockIdx.y;
  const int seq = blockIdx.z;
  const int group = params.num_q_heads / params.num_kv_heads;
  const int query_begin = params.query_start[seq];
  const int num_queries = params.query_start[seq + 1] - query_begin;
  const int num_rows = num_queries * group;
  const int row0 = tile * kPrefillBlockM;
  if (row0 >= num_rows) return;  // whole block: the sequence has fewer queries
  const int context_len = params.context_lens[seq];
  const int first_pos = context_len - num_queries;  // position of query 0
  const int last_row = min(row0 + kPrefillBlockM, num_rows) - 1;
  const int kv_end = first_pos + last_row / group + 1;  // keys this tile needs

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;

  // Stage the tile's queries.
  const T* q = static_cast<const T*>(params.q);
  for (int index = threadIdx.x; index < kPrefillBlockM * kVecsPerRow; index += kThreads) {
    const int r = index / kVecsPerRow;
    const int c = index % kVecsPerRow;
    const int row = row0 + r;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (row < num_rows) {
      const int query = row / group;
      const int q_head = kv_head * group + row % group;
      value = LoadReadOnly16(
          q + (static_cast<size_t>(query_begin + query) * params.num_q_heads + q_head) * kHeadDim +
          c * kVec);
    }
    *reinterpret_cast<uint4*>(&q_tile[r][c * kVec]) = value;
  }

  // Position of each of this warp's rows; -1 masks every key (padding rows).
  int position[kPrefillRowsPerWarp];
  float running_max[kPrefillRowsPerWarp];
  float running_sum[kPrefillRowsPerWarp];
  float acc[kPrefillRowsPerWarp][kDimsPerLane];
#pragma unroll
  for (int i = 0; i < kPrefillRowsPerWarp; ++i) {
    const int row = row0 + warp * kPrefillRowsPerWarp + i;
    position[i] = row < num_rows ? first_pos + row / group : -1;
    running_max[i] = kNoMax;
    running_sum[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < kDimsPerLane; ++c) acc[i][c] = 0.0f;
  }
  int warp_last_position = -1;
#pragma unroll
  for (int i = 0; i < kPrefillRowsPerWarp; ++i) {
    warp_last_position = max(warp_last_position, position[i]);
  }

  const int32_t* block_table =
      params.block_tables + static_cast<size_t>(seq) * params.max_blocks_per_seq;
  const size_t head_stride = static_cast<size_t>(kBlockSize) * kHeadDim;
  const size_t block_stride = head_stride * params.num_kv_heads;
  const T* k_head = static_cast<const T*>(params.k_cache) + kv_head * head_stride;
  const T* v_head = static_cast<const T*>(params.v_cache) + kv_head * head_stride;
  const float score_scale = params.softmax_scale * kLog2e;

  for (int key0 = 0; key0 < kv_end; key0 += kPrefillBlockN) {
    __syncthreads();  // the previous K/V tile (and, first time, q_tile) is done with
    for (int index = threadIdx.x; index < kPrefillBlockN * kVecsPerRow; index += kThreads) {
      const int k = index / kVecsPerRow;
      const int c = index % kVecsPerRow;
      const int token = key0 + k;
      uint4 k_value = make_uint4(0, 0, 0, 0);
      uint4 v_value = make_uint4(0, 0, 0, 0);
      if (token < kv_end) {
        const size_t offset = static_cast<size_t>(block_table[token / kBlockSize]) * block_stride +
                              static_cast<size_t>(token % kBlockSize) * kHeadDim + c * kVec;
        k_value = LoadReadOnly16(k_head + offset);
        v_value = LoadReadOnly16(v_head + offset);
      }
      *reinterpret_cast<uint4*>(&k_tile[k][c * kVec]) = k_value;
      *reinterpret_cast<uint4*>(&v_tile[k][c * kVec]) = v_value;
    }
    __syncthreads();
    if (key0 > warp_last_position) continue;  // causal: every key is in this warp's future

    const int key = key0 + lane;
#pragma unroll
    for (int i = 0; i < kPrefillRowsPerWarp; ++i) {
      const T* q_row = q_tile[warp * kPrefillRowsPerWarp + i];
      float score = 0.0f;
#pragma unroll
      for (int c = 0; c < kVecsPerRow; ++c) {
        float qf[kVec];
        float kf[kVec];
        ToFloat8<T>(*reinterpret_cast<const uint4*>(q_row + c * kVec), qf);
        ToFloat8<T>(*reinterpret_cast<const uint4*>(&k_tile[lane][c * kVec]), kf);
#pragma unroll
        for (int e = 0; e < kVec; ++e) score = fmaf(qf[e], kf[e], score);
      }
      score = key <= position[i] ? score * score_scale : -INFINITY;
      const float new_max = fmaxf(running_max[i], WarpMax(score));
      const float correction = exp2f(running_max[i] - new_max);
      const float prob = exp2f(score - new_max);
      running_max[i] = new_max;
      running_sum[i] = running_sum[i] * correction + WarpSum(prob);
#pragma unroll
      for (int c = 0; c < kDimsPerLane; ++c) acc[i][c] *= correction;
#pragma unroll 8
      for (int j = 0; j < kPrefillBlockN; ++j) {
        const float p = __shfl_sync(kFullMask, prob, j);
        const T* v_row = &v_tile[j][lane * kDimsPerLane];
        if constexpr (kDimsPerLane == 4) {
          const uint2 words = *reinterpret_cast<const uint2*>(v_row);
          const float2 lo = WordToFloat2<T>(words.x);
          const float2 hi = WordToFloat2<T>(words.y);
          acc[i][0] = fmaf(p, lo.x, acc[i][0]);
          acc[i][1] = fmaf(p, lo.y, acc[i][1]);
          acc[i][2] = fmaf(p, hi.x, acc[i][2]);
          acc[i][3] = fmaf(p, hi.y, acc[i][3]);
        } else {
          const float2 pair = WordToFloat2<T>(*reinterpret_cast<const uint32_t*>(v_row));
          acc[i][0] = fmaf(p, pair.x, acc[i][0]);
          acc[i][1] = fmaf(p, pair.y, acc[i][1]);
        }
      }
    }
  }

  T* out = static_cast<T*>(params.out);
#pragma unroll
  for (int i = 0; i < kPrefillRowsPerWarp; ++i) {
    const int row = row0 + warp * kPrefillRowsPerWarp + i;
    if (row >= num_rows) continue;
    // running_sum >= 1: key 0 is visible to every query (position >= 0).
    const float inverse = 1.0f / running_sum[i];
    const int query = row / group;
    const int q_head = kv_head * group + row % group;
    T* dst = out +
             (static_cast<size_t>(query_begin + query) * params.num_q_heads + q_head) * kHeadDim +
             lane * kDimsPerLane;
#pragma unroll
    for (int c = 0; c < kDimsPerLane; ++c) dst[c] = FromFloat<T>(acc[i][c] * inverse);
  }
}

template <typename T, int kHeadDim, int kBlockSize>
cudaError_t LaunchPrefillTyped(const PrefillAttentionParams& params, cudaStream_t stream) {
  const int group = params.num_q_heads / params.num_kv_heads;
  const long long rows = static_cast<long long>(params.max_query_len) * group;
  const long long tiles = (rows + kPrefillBlockM - 1) / kPrefillBlockM;
  if (tiles > 0x7fffffffLL || params.num_kv_heads > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(tiles), params.num_kv_heads, params.num_seqs);
  PrefillAttentionKernel<T, kHeadDim, kBlockSize><<<grid, kPrefillWarps * 32, 0, stream>>>(params);
  return cudaGetLastError();
}

// Maps the runtime head dim and block size to the compiled variants for
// element type T; cudaErrorInvalidValue for anything else.
template <typename T>
cudaError_t LaunchPrefillForType(const PrefillAttentionParams& params, cudaStream_t stream) {
  if (params.head_dim == 64 && params.block_size == 16) {
    return LaunchPrefillTyped<T, 64, 16>(params, stream);
  }
  if (params.head_dim == 64 && params.block_size == 32) {
    return LaunchPrefillTyped<T, 64, 32>(params, stream);
  }
  if (params.head_dim == 128 && params.block_size == 16) {
    return LaunchPrefillTyped<T, 128, 16>(params, stream);
  }
  if (params.head_dim == 128 && params.block_size == 32) {
    return LaunchPrefillTyped<T, 128, 32>(params, stream);
  }
  return cudaErrorInvalidValue;
}

// Instantiated in prefill_attention_bf16.cu and prefill_attention_f16.cu only.
extern template cudaError_t LaunchPrefillForType<__nv_bfloat16>(const PrefillAttentionParams&,
                                                                cudaStream_t);
extern template cudaError_t LaunchPrefillForType<__half>(const PrefillAttentionParams&,
                                                         cudaStream_t);

}  // namespace pagoda::kernels::attention_internal

#endif  // PAGODA_KERNELS_ATTENTION_PREFILL_ATTENTION_CUH_
