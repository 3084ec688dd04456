// Decode attention kernels (one query token per sequence) over the paged KV
// cache, and their typed launcher. Included only by the decode_attention*.cu
// files, which instantiate the served combinations.
//
// Work split: one thread block per (kv head, sequence, partition). The block
// holds the queries of ALL query heads that share the kv head (GQA group), so
// each K/V byte is read from memory once per group. Inside the block:
//   - a token row of head_dim elements is read by head_dim / 8 lanes, 16 bytes
//     each (one fully used 256-byte or 128-byte segment per token);
//   - a warp therefore covers 32 / (head_dim / 8) tokens per load and issues
//     kUnroll such loads of K and of V before using any, for bytes in flight;
//   - each lane keeps its own online-softmax state (max, sum, output slice)
//     for every head of the group, merged across lanes and warps at the end.
// With a split (partition_size > 0) each block writes a normalised partial
// output and its log2-sum-exp to the workspace; a second kernel merges them.
// An FP8 cache (kFp8) is read 8 bytes a lane instead of 16 and widened
// exactly in registers; k_scale rides on the query's scale and v_scale on
// the output, so the arithmetic is that of a cache holding the codes.
#ifndef PAGODA_KERNELS_ATTENTION_DECODE_ATTENTION_CUH_
#define PAGODA_KERNELS_ATTENTION_DECODE_ATTENTION_CUH_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/attention/attention_common.cuh"
#include "kernels/attention/paged_attention.h"

namespace pagoda::kernels::attention_internal {

constexpr int kDecodeWarps = 4;
constexpr int kDecodeUnroll = 4;

// Starts the loads (16 bytes, 8 for FP8) of this lane's slice of K and V for
// the kDecodeUnroll token slots from `base`; tokens at or past `end` are
// zeros.
template <typename T, int kFp8, int kHeadDim, int kBlockSize>
__device__ __forceinline__ void LoadKvSlots(const typename KvChunk<T, kFp8>::Elem* k_head,
                                            const typename KvChunk<T, kFp8>::Elem* v_head,
                                            const int32_t* block_table, size_t block_stride,
                                            int base, int end, int token_slot,
                                            typename KvChunk<T, kFp8>::Raw (&k_raw)[kDecodeUnroll],
                                            typename KvChunk<T, kFp8>::Raw (&v_raw)[kDecodeUnroll],
                                            bool (&valid)[kDecodeUnroll]) {
  using Chunk = KvChunk<T, kFp8>;
  constexpr int kTokensPerLoad = 32 / (kHeadDim / 8);
#pragma unroll
  for (int u = 0; u < kDecodeUnroll; ++u) {
    const int token = base + u * kTokensPerLoad + token_slot;
    valid[u] = token < end;
    k_raw[u] = Chunk::Zero();
    v_raw[u] = Chunk::Zero();
    if (valid[u]) {
      const size_t offset = static_cast<size_t>(block_table[token / kBlockSize]) * block_stride +
                            static_cast<size_t>(token % kBlockSize) * kHeadDim;
      k_raw[u] = Chunk::Load(k_head + offset);
      v_raw[u] = Chunk::Load(v_head + offset);
    }
  }
}

// kPrefetch: each warp issues the next iteration's loads before computing on
// the current ones, so memory and arithmetic overlap within the warp.
template <typename T, int kFp8, int kHeadDim, int kBlockSize, int kGroupMax, bool kPrefetch>
__global__ void __launch_bounds__(kDecodeWarps * 32)
    DecodeAttentionKernel(DecodeAttentionParams params, int partition_size, int max_num_partitions,
                          float* __restrict__ partial_out, float* __restrict__ partial_lse) {
  using Chunk = KvChunk<T, kFp8>;
  using KvRaw = typename Chunk::Raw;
  using KvElem = typename Chunk::Elem;
  constexpr int kVec = 8;                          // elements per K/V load
  constexpr int kLanesPerToken = kHeadDim / kVec;  // 16 (d=128) or 8 (d=64)
  constexpr int kTokensPerLoad = 32 / kLanesPerToken;
  constexpr int kTokensPerWarpIter = kTokensPerLoad * kDecodeUnroll;
  constexpr int kTokensPerBlockIter = kTokensPerWarpIter * kDecodeWarps;
  static_assert(kBlockSize % kTokensPerLoad == 0, "a load must not straddle cache blocks");

  __shared__ float shared_max[kDecodeWarps][kGroupMax];
  __shared__ float shared_sum[kDecodeWarps][kGroupMax];
  __shared__ float shared_out[kDecodeWarps][kGroupMax][kHeadDim];

  const int kv_head = blockIdx.x;
  const int seq = blockIdx.y;
  const int partition = blockIdx.z;
  const int group = params.num_q_heads / params.num_kv_heads;
  const int context_len = params.context_lens[seq];
  const int begin = partition_size > 0 ? partition * partition_size : 0;
  if (begin >= context_len) return;  // whole block: this partition is past the end
  const int end = partition_size > 0 ? min(context_len, begin + partition_size) : context_len;

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int dim_slice = lane % kLanesPerToken;  // which 8 elements of a row
  const int token_slot = lane / kLanesPerToken;

  // Queries of the group, pre-scaled so that scores come out in log2 units
  // (and, for FP8, by k_scale: the scores of code * k_scale).
  const float q_scale = params.softmax_scale * kLog2e * (kFp8 ? params.k_scale : 1.0f);
  // params.q_token_stride is resolved (never 0) by LaunchDecodeAttention.
  const T* q_base = static_cast<const T*>(params.q) +
                    static_cast<size_t>(seq) * params.q_token_stride +
                    static_cast<size_t>(kv_head) * group * kHeadDim + dim_slice * kVec;
  float q[kGroupMax][kVec];
#pragma unroll
  for (int g = 0; g < kGroupMax; ++g) {
    if (g < group) {
      ToFloat8<T>(LoadReadOnly16(q_base + g * kHeadDim), q[g]);
#pragma unroll
      for (int i = 0; i < kVec; ++i) q[g][i] *= q_scale;
    } else {
#pragma unroll
      for (int i = 0; i < kVec; ++i) q[g][i] = 0.0f;
    }
  }

  float running_max[kGroupMax];
  float running_sum[kGroupMax];
  float acc[kGroupMax][kVec];
#pragma unroll
  for (int g = 0; g < kGroupMax; ++g) {
    running_max[g] = kNoMax;
    running_sum[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < kVec; ++i) acc[g][i] = 0.0f;
  }

  const int32_t* block_table =
      params.block_tables + static_cast<size_t>(seq) * params.max_blocks_per_seq;
  const size_t head_stride = static_cast<size_t>(kBlockSize) * kHeadDim;
  const size_t block_stride = head_stride * params.num_kv_heads;
  const KvElem* k_head =
      static_cast<const KvElem*>(params.k_cache) + kv_head * head_stride + dim_slice * kVec;
  const KvElem* v_head =
      static_cast<const KvElem*>(params.v_cache) + kv_head * head_stride + dim_slice * kVec;

  // The loop bound depends only on the warp, so whole warps iterate together
  // (the shuffles below need all 32 lanes).
  KvRaw k_next[kDecodeUnroll];
  KvRaw v_next[kDecodeUnroll];
  bool valid_next[kDecodeUnroll];
  const int first_base = begin + warp * kTokensPerWarpIter;
  if (kPrefetch && first_base < end) {
    LoadKvSlots<T, kFp8, kHeadDim, kBlockSize>(k_head, v_head, block_table, block_stride,
                                               first_base, end, token_slot, k_next, v_next,
                                               valid_next);
  }
  for (int base = first_base; base < end; base += kTokensPerBlockIter) {
    KvRaw k_raw[kDecodeUnroll];
    KvRaw v_raw[kDecodeUnroll];
    bool valid[kDecodeUnroll];
    if constexpr (kPrefetch) {
#pragma unroll
      for (int u = 0; u < kDecodeUnroll; ++u) {
        k_raw[u] = k_next[u];
        v_raw[u] = v_next[u];
        valid[u] = valid_next[u];
      }
      if (base + kTokensPerBlockIter < end) {
        LoadKvSlots<T, kFp8, kHeadDim, kBlockSize>(k_head, v_head, block_table, block_stride,
                                                   base + kTokensPerBlockIter, end, token_slot,
                                                   k_next, v_next, valid_next);
      }
    } else {
      LoadKvSlots<T, kFp8, kHeadDim, kBlockSize>(k_head, v_head, block_table, block_stride, base,
                                                 end, token_slot, k_raw, v_raw, valid);
    }

    float score[kDecodeUnroll][kGroupMax];
#pragma unroll
    for (int u = 0; u < kDecodeUnroll; ++u) {
      float k[kVec];
      Chunk::Widen(k_raw[u], k);
#pragma unroll
      for (int g = 0; g < kGroupMax; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < kVec; ++i) dot = fmaf(q[g][i], k[i], dot);
        score[u][g] = dot;
      }
    }
    // Sum the partial dot products of the lanes that share a token.
#pragma unroll
    for (int u = 0; u < kDecodeUnroll; ++u) {
#pragma unroll
      for (int g = 0; g < kGroupMax; ++g) {
#pragma unroll
        for (int offset = kLanesPerToken / 2; offset > 0; offset /= 2) {
          score[u][g] += __shfl_xor_sync(kFullMask, score[u][g], offset);
        }
        if (!valid[u]) score[u][g] = -INFINITY;
      }
    }

    // Online softmax: rescale once per iteration, then accumulate.
#pragma unroll
    for (int g = 0; g < kGroupMax; ++g) {
      float new_max = running_max[g];
#pragma unroll
      for (int u = 0; u < kDecodeUnroll; ++u) new_max = fmaxf(new_max, score[u][g]);
      const float correction = exp2f(running_max[g] - new_max);
      running_max[g] = new_max;
      running_sum[g] *= correction;
#pragma unroll
      for (int i = 0; i < kVec; ++i) acc[g][i] *= correction;
    }
#pragma unroll
    for (int u = 0; u < kDecodeUnroll; ++u) {
      float v[kVec];
      Chunk::Widen(v_raw[u], v);
#pragma unroll
      for (int g = 0; g < kGroupMax; ++g) {
        const float prob = exp2f(score[u][g] - running_max[g]);
        running_sum[g] += prob;
#pragma unroll
        for (int i = 0; i < kVec; ++i) acc[g][i] = fmaf(prob, v[i], acc[g][i]);
      }
    }
  }

  // Merge the token slots of the warp (lanes with the same dim_slice).
#pragma unroll
  for (int offset = kLanesPerToken; offset < 32; offset *= 2) {
#pragma unroll
    for (int g = 0; g < kGroupMax; ++g) {
      const float other_max = __shfl_xor_sync(kFullMask, running_max[g], offset);
      const float other_sum = __shfl_xor_sync(kFullMask, running_sum[g], offset);
      const float new_max = fmaxf(running_max[g], other_max);
      const float mine = exp2f(running_max[g] - new_max);
      const float theirs = exp2f(other_max - new_max);
      running_max[g] = new_max;
      running_sum[g] = running_sum[g] * mine + other_sum * theirs;
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const float other_acc = __shfl_xor_sync(kFullMask, acc[g][i], offset);
        acc[g][i] = acc[g][i] * mine + other_acc * theirs;
      }
    }
  }
  if (token_slot == 0) {
#pragma unroll
    for (int g = 0; g < kGroupMax; ++g) {
#pragma unroll
      for (int i = 0; i < kVec; ++i) shared_out[warp][g][dim_slice * kVec + i] = acc[g][i];
      if (dim_slice == 0) {
        shared_max[warp][g] = running_max[g];
        shared_sum[warp][g] = running_sum[g];
      }
    }
  }
  __syncthreads();

  // Merge the warps: one thread per (head of the group, output element).
  for (int index = threadIdx.x; index < group * kHeadDim; index += kDecodeWarps * 32) {
    const int g = index / kHeadDim;
    const int d = index % kHeadDim;
    float block_max = kNoMax;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) block_max = fmaxf(block_max, shared_max[w][g]);
    float sum = 0.0f;
    float out = 0.0f;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) {
      const float weight = exp2f(shared_max[w][g] - block_max);
      sum += shared_sum[w][g] * weight;
      out += shared_out[w][g][d] * weight;
    }
    // sum >= 1: the largest score contributes exp2(0) and begin < end. An
    // FP8 cache's v_scale scales every partial alike, so it goes on here.
    const int q_head = kv_head * group + g;
    float result = out / sum;
    if constexpr (kFp8 != 0) result *= params.v_scale;
    if (partition_size == 0) {
      T* dst = static_cast<T*>(params.out) +
               (static_cast<size_t>(seq) * params.num_q_heads + q_head) * kHeadDim + d;
      *dst = FromFloat<T>(result);
    } else {
      const size_t row =
          (static_cast<size_t>(seq) * params.num_q_heads + q_head) * max_num_partitions + partition;
      partial_out[row * kHeadDim + d] = result;
      if (d == 0) partial_lse[row] = block_max + log2f(sum);
    }
  }
}

// Merges the partitions of one (query head, sequence): out = sum_p w_p o_p / sum_p w_p
// with w_p = 2^(lse_p - max lse). One thread per output element.
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kHeadDim)
    DecodeMergePartitionsKernel(DecodeAttentionParams params, int partition_size,
                                int max_num_partitions, const float* __restrict__ partial_out,
                                const float* __restrict__ partial_lse) {
  const int q_head = blockIdx.x;
  const int seq = blockIdx.y;
  const int d = threadIdx.x;
  const int num_partitions = (params.context_lens[seq] + partition_size - 1) / partition_size;
  const size_t first_row =
      (static_cast<size_t>(seq) * params.num_q_heads + q_head) * max_num_partitions;
  float max_lse = kNoMax;
  for (int p = 0; p < num_partitions; ++p) max_lse = fmaxf(max_lse, partial_lse[first_row + p]);
  float sum = 0.0f;
  float out = 0.0f;
  for (int p = 0; p < num_partitions; ++p) {
    const float weight = exp2f(partial_lse[first_row + p] - max_lse);
    sum += weight;
    out = fmaf(weight, partial_out[(first_row + p) * kHeadDim + d], out);
  }
  T* dst = static_cast<T*>(params.out) +
           (static_cast<size_t>(seq) * params.num_q_heads + q_head) * kHeadDim + d;
  *dst = FromFloat<T>(out / sum);
}

template <typename T, int kFp8, int kHeadDim, int kBlockSize, int kGroupMax, bool kPrefetch>
cudaError_t LaunchDecodeTyped(const DecodeAttentionParams& params, const DecodePlan& plan,
                              void* workspace, cudaStream_t stream) {
  const bool split = plan.partition_size > 0;
  float* partial_out = nullptr;
  float* partial_lse = nullptr;
  if (split) {
    if (workspace == nullptr) return cudaErrorInvalidValue;
    // The plan fixes the workspace size for the batch and heads it was made
    // for; a plan reused for a larger batch (or other heads) would write past
    // the workspace. Also the grid depth is limited to 65535.
    const size_t rows =
        static_cast<size_t>(params.num_seqs) * params.num_q_heads * plan.max_num_partitions;
    if (plan.max_num_partitions < 1 || plan.max_num_partitions > 65535 ||
        rows * (kHeadDim + 1) * sizeof(float) > plan.workspace_bytes) {
      return cudaErrorInvalidValue;
    }
    partial_out = static_cast<float*>(workspace);
    partial_lse = partial_out + rows * kHeadDim;
  }
  const dim3 grid(params.num_kv_heads, params.num_seqs, split ? plan.max_num_partitions : 1);
  DecodeAttentionKernel<T, kFp8, kHeadDim, kBlockSize, kGroupMax, kPrefetch>
      <<<grid, kDecodeWarps * 32, 0, stream>>>(params, plan.partition_size, plan.max_num_partitions,
                                               partial_out, partial_lse);
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess || !split) return error;
  DecodeMergePartitionsKernel<T, kHeadDim>
      <<<dim3(params.num_q_heads, params.num_seqs), kHeadDim, 0, stream>>>(
          params, plan.partition_size, plan.max_num_partitions, partial_out, partial_lse);
  return cudaGetLastError();
}

template <typename T, int kFp8, int kHeadDim, int kBlockSize>
cudaError_t DispatchDecodeGroup(const DecodeAttentionParams& params, const DecodePlan& plan,
                                void* workspace, cudaStream_t stream) {
  const int group = params.num_q_heads / params.num_kv_heads;
  const bool prefetch = plan.prefetch;
  if (group == 1) {
    return prefetch ? LaunchDecodeTyped<T, kFp8, kHeadDim, kBlockSize, 1, true>(params, plan,
                                                                                workspace, stream)
                    : LaunchDecodeTyped<T, kFp8, kHeadDim, kBlockSize, 1, false>(params, plan,
                                                                                 workspace, stream);
  }
  if (group <= 4) {
    return prefetch ? LaunchDecodeTyped<T, kFp8, kHeadDim, kBlockSize, 4, true>(params, plan,
                                                                                workspace, stream)
                    : LaunchDecodeTyped<T, kFp8, kHeadDim, kBlockSize, 4, false>(params, plan,
                                                                                 workspace, stream);
  }
  if (group <= 8) {  // No registers to spare for a second set of loads.
    return LaunchDecodeTyped<T, kFp8, kHeadDim, kBlockSize, 8, false>(params, plan, workspace,
                                                                      stream);
  }
  return cudaErrorInvalidValue;
}

template <typename T, int kFp8, int kHeadDim>
cudaError_t DispatchDecodeBlockSize(const DecodeAttentionParams& params, const DecodePlan& plan,
                                    void* workspace, cudaStream_t stream) {
  switch (params.block_size) {
    case 16:
      return DispatchDecodeGroup<T, kFp8, kHeadDim, 16>(params, plan, workspace, stream);
    case 32:
      return DispatchDecodeGroup<T, kFp8, kHeadDim, 32>(params, plan, workspace, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

// Maps the runtime head dim, block size and group size to the compiled
// variants for element type T over a T (or, kFp8, an FP8 E4M3) cache;
// cudaErrorInvalidValue for anything else.
template <typename T, int kFp8>
cudaError_t LaunchDecodeForType(const DecodeAttentionParams& params, const DecodePlan& plan,
                                void* workspace, cudaStream_t stream) {
  switch (params.head_dim) {
    case 64:
      return DispatchDecodeBlockSize<T, kFp8, 64>(params, plan, workspace, stream);
    case 128:
      return DispatchDecodeBlockSize<T, kFp8, 128>(params, plan, workspace, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

// Instantiated in decode_attention_{bf16,f16}{,_fp8,_e5m2}.cu only.
extern template cudaError_t LaunchDecodeForType<__nv_bfloat16, false>(const DecodeAttentionParams&,
                                                                      const DecodePlan&, void*,
                                                                      cudaStream_t);
extern template cudaError_t LaunchDecodeForType<__half, false>(const DecodeAttentionParams&,
                                                               const DecodePlan&, void*,
                                                               cudaStream_t);
extern template cudaError_t LaunchDecodeForType<__nv_bfloat16, true>(const DecodeAttentionParams&,
                                                                     const DecodePlan&, void*,
                                                                     cudaStream_t);
extern template cudaError_t LaunchDecodeForType<__half, true>(const DecodeAttentionParams&,
                                                              const DecodePlan&, void*,
                                                              cudaStream_t);

extern template cudaError_t LaunchDecodeForType<__nv_bfloat16, kKvFp8E5M2>(
    const DecodeAttentionParams&, const DecodePlan&, void*, cudaStream_t);
extern template cudaError_t LaunchDecodeForType<__half, kKvFp8E5M2>(const DecodeAttentionParams&,
                                                                    const DecodePlan&, void*,
                                                                    cudaStream_t);

}  // namespace pagoda::kernels::attention_internal

#endif  // PAGODA_KERNELS_ATTENTION_DECODE_ATTENTION_CUH_
