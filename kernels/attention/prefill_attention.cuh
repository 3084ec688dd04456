// Prefill attention kernel (causal, variable-length batch, queries after an
// optional cached prefix) over the paged KV cache, and its typed launcher.
// Included only by prefill_attention_{bf16,f16}.cu and attention_launch.cu.
//
// FlashAttention-2 on the tensor cores (mma.m16n8k16, f32 accumulation; see
// mma_sm80.cuh for the fragment layouts). One thread block per (row tile, kv
// head, sequence). A "row" is one (query token, query head of the kv group)
// pair, so the GQA heads of a group share every K/V tile. Each of the 4 warps
// owns 16 rows: their Q fragments stay in registers for the whole kernel, the
// scores S = Q.K^T of a 64-key tile come out of the MMAs in registers, the
// online softmax runs on them there (a row is spread over the 4 lanes of a
// quad), and P is fed back as the A operand of O += P.V without touching
// shared memory. K and V tiles are gathered through the block table with
// cp.async (zero-filled past the keys the tile needs), V's copy overlapping
// the S MMAs and the next K's copy overlapping the P.V MMAs. An FP8 E4M3
// cache (kFp8) is gathered into registers instead (8 bytes a chunk), at the
// same points, and widened exactly to T into the same shared tiles once the
// MMAs it overlapped are issued; k_scale rides on the score scale and v_scale
// on the output, so the MMAs run on the codes' exact values.
#ifndef PAGODA_KERNELS_ATTENTION_PREFILL_ATTENTION_CUH_
#define PAGODA_KERNELS_ATTENTION_PREFILL_ATTENTION_CUH_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/attention/attention_common.cuh"
#include "kernels/attention/mma_sm80.cuh"
#include "kernels/attention/paged_attention.h"

namespace pagoda::kernels::attention_internal {

constexpr int kPrefillWarps = 4;
constexpr int kPrefillThreads = kPrefillWarps * 32;
constexpr int kPrefillBlockM = kPrefillWarps * 16;  // rows per thread block
constexpr int kPrefillBlockN = 64;                  // keys per K/V tile

// Shared-memory row stride in elements: 16 bytes of padding make the 8 rows
// an MMA fragment (or an ldmatrix) touches fall in 8 different bank groups.
template <int kHeadDim>
constexpr int kPrefillSmemStride = kHeadDim + 8;

// Where one sequence's rows and keys are, for one thread block.
struct PrefillTile {
  int group = 0;        // query heads per kv head
  int query_begin = 0;  // first query token of the sequence in q / out
  int num_rows = 0;     // query tokens x group
  int first_pos = 0;    // position of the sequence's first query token
  int kv_end = 0;       // keys this thread block needs: [0, kv_end)
};

// The chunks of 8 elements one thread moves of a 64-key tile.
template <int kHeadDim>
constexpr int kPrefillCopiesPerThread = kPrefillBlockN*(kHeadDim / 8) / kPrefillThreads;

// Starts the asynchronous gather of keys [key0, key0 + kPrefillBlockN) of one
// kv head (K or V) into `tile`; keys at or past kv_end are zero-filled.
template <typename T, int kHeadDim, int kBlockSize>
__device__ __forceinline__ void LoadKvTile(T* tile, const T* head_base, const int32_t* block_table,
                                           size_t block_stride, int key0, int kv_end) {
  constexpr int kChunksPerRow = kHeadDim / 8;
  constexpr int kStride = kPrefillSmemStride<kHeadDim>;
  constexpr int kCopiesPerThread = kPrefillCopiesPerThread<kHeadDim>;
  static_assert(kCopiesPerThread * kPrefillThreads == kPrefillBlockN * kChunksPerRow);
#pragma unroll
  for (int i = 0; i < kCopiesPerThread; ++i) {
    const int index = threadIdx.x + i * kPrefillThreads;
    const int k = index / kChunksPerRow;
    const int chunk = index % kChunksPerRow;
    const int token = key0 + k;
    const bool valid = token < kv_end;
    const size_t offset =
        valid ? static_cast<size_t>(block_table[token / kBlockSize]) * block_stride +
                    static_cast<size_t>(token % kBlockSize) * kHeadDim + chunk * 8
              : 0;
    CpAsync16(tile + k * kStride + chunk * 8, head_base + offset, valid);
  }
  CpAsyncCommit();
}

// An FP8 tile's chunks in flight: this thread's share of keys [key0, key0 +
// kPrefillBlockN) of one kv head, 8 codes a chunk, zero past kv_end (the
// same chunks LoadKvTile copies).
template <int kHeadDim>
struct Fp8TileChunks {
  uint2 codes[kPrefillCopiesPerThread<kHeadDim>];
};

// Issues the loads of an FP8 tile's chunks into registers.
template <int kHeadDim, int kBlockSize>
__device__ __forceinline__ void LoadFp8KvChunks(Fp8TileChunks<kHeadDim>& chunks,
                                                const uint8_t* head_base,
                                                const int32_t* block_table, size_t block_stride,
                                                int key0, int kv_end) {
  constexpr int kChunksPerRow = kHeadDim / 8;
#pragma unroll
  for (int i = 0; i < kPrefillCopiesPerThread<kHeadDim>; ++i) {
    const int index = threadIdx.x + i * kPrefillThreads;
    const int token = key0 + index / kChunksPerRow;
    chunks.codes[i] = make_uint2(0, 0);
    if (token < kv_end) {
      const size_t offset = static_cast<size_t>(block_table[token / kBlockSize]) * block_stride +
                            static_cast<size_t>(token % kBlockSize) * kHeadDim +
                            (index % kChunksPerRow) * 8;
      chunks.codes[i] = __ldg(reinterpret_cast<const uint2*>(head_base + offset));
    }
  }
}

// Widens the chunks to T (exactly: every E4M3 and E5M2 value is a bf16
// and an f16)
// and stores them where LoadKvTile would have put them.
template <typename T, int kFormat, int kHeadDim>
__device__ __forceinline__ void StoreFp8KvChunks(T* tile, const Fp8TileChunks<kHeadDim>& chunks) {
  constexpr int kChunksPerRow = kHeadDim / 8;
  constexpr int kStride = kPrefillSmemStride<kHeadDim>;
#pragma unroll
  for (int i = 0; i < kPrefillCopiesPerThread<kHeadDim>; ++i) {
    const int index = threadIdx.x + i * kPrefillThreads;
    float values[8];
    Fp8x8ToFloat<kFormat>(chunks.codes[i], values);
    const uint4 packed =
        make_uint4(PackFloat2<T>(values[0], values[1]), PackFloat2<T>(values[2], values[3]),
                   PackFloat2<T>(values[4], values[5]), PackFloat2<T>(values[6], values[7]));
    *reinterpret_cast<uint4*>(tile + (index / kChunksPerRow) * kStride +
                              (index % kChunksPerRow) * 8) = packed;
  }
}

// One K or V tile's gather, from a T cache (cp.async straight into shared
// memory; Finish does nothing) or an FP8 one (Start loads registers, Finish
// widens them into the tile). Between Start and Finish the thread may
// compute; the tile is complete for every thread after Finish, the cp.async
// wait and a __syncthreads.
template <typename T, int kFp8, int kHeadDim, int kBlockSize>
struct KvTileGather {
  using Elem = std::conditional_t<kFp8 != 0, uint8_t, T>;
  const Elem* head_base;
  const int32_t* block_table;
  size_t block_stride;
  int kv_end;
  Fp8TileChunks<kHeadDim> chunks;

  __device__ __forceinline__ void Start(T* tile, int key0) {
    if constexpr (kFp8 != 0) {
      LoadFp8KvChunks<kHeadDim, kBlockSize>(chunks, head_base, block_table, block_stride, key0,
                                            kv_end);
    } else {
      LoadKvTile<T, kHeadDim, kBlockSize>(tile, head_base, block_table, block_stride, key0, kv_end);
    }
  }
  __device__ __forceinline__ void Finish(T* tile) {
    if constexpr (kFp8 != 0) StoreFp8KvChunks<T, kFp8, kHeadDim>(tile, chunks);
  }
};

// The A fragments of this lane's two rows (warp_row0 + g, + g + 8) of Q, for
// every 16-wide slice of the head; zero for padding rows.
template <typename T, int kHeadDim>
__device__ __forceinline__ void LoadQueryFragments(uint32_t (&q_frag)[kHeadDim / 16][4],
                                                   const PrefillAttentionParams& params,
                                                   const PrefillTile& tile, int kv_head,
                                                   int warp_row0, int g, int t) {
  const T* q = static_cast<const T*>(params.q);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = warp_row0 + g + 8 * half;
    const bool valid = row < tile.num_rows;
    // params.q_token_stride is resolved (never 0) by LaunchPrefillAttention.
    const T* q_row =
        q +
        static_cast<size_t>(tile.query_begin + (valid ? row / tile.group : 0)) *
            params.q_token_stride +
        static_cast<size_t>(kv_head * tile.group + (valid ? row % tile.group : 0)) * kHeadDim;
#pragma unroll
    for (int step = 0; step < kHeadDim / 16; ++step) {
      const int column = step * 16 + 2 * t;
      q_frag[step][half] = valid ? __ldg(reinterpret_cast<const uint32_t*>(q_row + column)) : 0u;
      q_frag[step][half + 2] =
          valid ? __ldg(reinterpret_cast<const uint32_t*>(q_row + column + 8)) : 0u;
    }
  }
}

// S = Q.K^T for one 64-key tile: s[j] holds keys j*8 + 2t, +1 of rows g, g+8.
// K's B fragments come through ldmatrix, two 8-key tiles per load.
template <typename T, int kHeadDim>
__device__ __forceinline__ void ScoreTile(float (&s)[kPrefillBlockN / 8][4],
                                          const uint32_t (&q_frag)[kHeadDim / 16][4],
                                          const T* k_tile, int lane) {
  constexpr int kStride = kPrefillSmemStride<kHeadDim>;
  const int matrix = lane / 8;
  const int key_in_pair = (matrix / 2) * 8 + lane % 8;
  const int column_in_step = (matrix % 2) * 8;
#pragma unroll
  for (int j = 0; j < kPrefillBlockN / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
  }
#pragma unroll
  for (int step = 0; step < kHeadDim / 16; ++step) {
#pragma unroll
    for (int pair = 0; pair < kPrefillBlockN / 16; ++pair) {
      uint32_t b[4];
      LdMatrixX4(b, k_tile + (pair * 16 + key_in_pair) * kStride + step * 16 + column_in_step);
      MmaM16N8K16<T>(s[2 * pair], q_frag[step], b[0], b[1]);
      MmaM16N8K16<T>(s[2 * pair + 1], q_frag[step], b[2], b[3]);
    }
  }
}

// Online softmax over one tile of scores, in the log2 domain: updates the
// running maxima and (this lane's partial) sums, rescales o, and leaves P
// packed as the A fragments of the P.V MMAs (16 keys per fragment). The sums
// add the rounded probabilities, the ones that multiply V.
template <typename T, int kHeadDim>
__device__ __forceinline__ void SoftmaxTile(float (&s)[kPrefillBlockN / 8][4],
                                            float (&o)[kHeadDim / 8][4], float (&row_max)[2],
                                            float (&row_sum)[2],
                                            uint32_t (&p_frag)[kPrefillBlockN / 16][4]) {
  float correction[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float m = row_max[half];
#pragma unroll
    for (int j = 0; j < kPrefillBlockN / 8; ++j) {
      m = fmaxf(m, fmaxf(s[j][2 * half], s[j][2 * half + 1]));
    }
    m = fmaxf(m, __shfl_xor_sync(kFullMask, m, 1));
    m = fmaxf(m, __shfl_xor_sync(kFullMask, m, 2));
    correction[half] = exp2f(row_max[half] - m);
    row_max[half] = m;
    row_sum[half] *= correction[half];
  }
#pragma unroll
  for (int d = 0; d < kHeadDim / 8; ++d) {
    o[d][0] *= correction[0];
    o[d][1] *= correction[0];
    o[d][2] *= correction[1];
    o[d][3] *= correction[1];
  }
#pragma unroll
  for (int j = 0; j < kPrefillBlockN / 8; ++j) {
    const uint32_t lo = PackFloat2<T>(exp2f(s[j][0] - row_max[0]), exp2f(s[j][1] - row_max[0]));
    const uint32_t hi = PackFloat2<T>(exp2f(s[j][2] - row_max[1]), exp2f(s[j][3] - row_max[1]));
    const float2 lo_f = WordToFloat2<T>(lo);
    const float2 hi_f = WordToFloat2<T>(hi);
    row_sum[0] += lo_f.x + lo_f.y;
    row_sum[1] += hi_f.x + hi_f.y;
    p_frag[j / 2][(j % 2) * 2] = lo;
    p_frag[j / 2][(j % 2) * 2 + 1] = hi;
  }
}

// o += P.V for one tile; V's B fragments come from shared memory through
// ldmatrix.trans, two 8-column output tiles per load.
template <typename T, int kHeadDim>
__device__ __forceinline__ void AccumulatePv(float (&o)[kHeadDim / 8][4],
                                             const uint32_t (&p_frag)[kPrefillBlockN / 16][4],
                                             const T* v_tile, int lane) {
  constexpr int kStride = kPrefillSmemStride<kHeadDim>;
  const int matrix = lane / 8;
  const int key_in_step = (matrix % 2) * 8 + lane % 8;
  const int column_in_pair = (matrix / 2) * 8;
#pragma unroll
  for (int step = 0; step < kPrefillBlockN / 16; ++step) {
#pragma unroll
    for (int pair = 0; pair < kHeadDim / 16; ++pair) {
      uint32_t b[4];
      LdMatrixX4Trans(b, v_tile + (step * 16 + key_in_step) * kStride + pair * 16 + column_in_pair);
      MmaM16N8K16<T>(o[2 * pair], p_frag[step], b[0], b[1]);
      MmaM16N8K16<T>(o[2 * pair + 1], p_frag[step], b[2], b[3]);
    }
  }
}

template <typename T, int kFp8, int kHeadDim, int kBlockSize>
__global__ void __launch_bounds__(kPrefillThreads)
    PrefillAttentionKernel(PrefillAttentionParams params) {
  using Gather = KvTileGather<T, kFp8, kHeadDim, kBlockSize>;
  using KvElem = typename Gather::Elem;
  constexpr int kStride = kPrefillSmemStride<kHeadDim>;
  __shared__ __align__(16) T k_tile[kPrefillBlockN * kStride];
  __shared__ __align__(16) T v_tile[kPrefillBlockN * kStride];

  // Row tiles in reverse: the last rows see the most keys, so they start first.
  const int row_tile = gridDim.x - 1 - blockIdx.x;
  const int kv_head = blockIdx.y;
  const int seq = blockIdx.z;
  PrefillTile tile;
  tile.group = params.num_q_heads / params.num_kv_heads;
  tile.query_begin = params.query_start[seq];
  const int num_queries = params.query_start[seq + 1] - tile.query_begin;
  tile.num_rows = num_queries * tile.group;
  const int row0 = row_tile * kPrefillBlockM;
  if (row0 >= tile.num_rows) return;  // whole block: the sequence has fewer queries
  tile.first_pos = params.context_lens[seq] - num_queries;
  tile.kv_end = tile.first_pos + (min(row0 + kPrefillBlockM, tile.num_rows) - 1) / tile.group + 1;

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int warp_row0 = row0 + warp * 16;
  // Positions of this lane's two rows (-1: padding, every key masked) and the
  // warp's first and last; rows are in position order.
  int position[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = warp_row0 + g + 8 * half;
    position[half] = row < tile.num_rows ? tile.first_pos + row / tile.group : -1;
  }
  const bool warp_has_rows = warp_row0 < tile.num_rows;
  const int warp_first_pos = warp_has_rows ? tile.first_pos + warp_row0 / tile.group : -1;
  const int warp_last_pos =
      warp_has_rows ? tile.first_pos + (min(warp_row0 + 15, tile.num_rows - 1)) / tile.group : -1;

  uint32_t q_frag[kHeadDim / 16][4];
  LoadQueryFragments<T, kHeadDim>(q_frag, params, tile, kv_head, warp_row0, g, t);
  float o[kHeadDim / 8][4];
#pragma unroll
  for (int d = 0; d < kHeadDim / 8; ++d) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[d][e] = 0.0f;
  }
  float row_max[2] = {kNoMax, kNoMax};
  float row_sum[2] = {0.0f, 0.0f};

  const int32_t* block_table =
      params.block_tables + static_cast<size_t>(seq) * params.max_blocks_per_seq;
  const size_t head_stride = static_cast<size_t>(kBlockSize) * kHeadDim;
  const size_t block_stride = head_stride * params.num_kv_heads;
  Gather k_gather{static_cast<const KvElem*>(params.k_cache) + kv_head * head_stride, block_table,
                  block_stride, tile.kv_end};
  Gather v_gather{static_cast<const KvElem*>(params.v_cache) + kv_head * head_stride, block_table,
                  block_stride, tile.kv_end};
  // An FP8 cache's k_scale: the scores are those of code * k_scale.
  const float score_scale = params.softmax_scale * kLog2e * (kFp8 ? params.k_scale : 1.0f);
  const int num_key_tiles = (tile.kv_end + kPrefillBlockN - 1) / kPrefillBlockN;

  k_gather.Start(k_tile, 0);
  k_gather.Finish(k_tile);
  for (int n = 0; n < num_key_tiles; ++n) {
    const int key0 = n * kPrefillBlockN;
    CpAsyncWaitAll();  // K(n)
    __syncthreads();   // ... for every thread; and every warp is done with V(n-1)
    v_gather.Start(v_tile, key0);
    // Warp-uniform: some key of the tile is visible to some row of this warp.
    const bool active = key0 <= warp_last_pos;
    uint32_t p_frag[kPrefillBlockN / 16][4];
    if (active) {
      float s[kPrefillBlockN / 8][4];
      ScoreTile<T, kHeadDim>(s, q_frag, k_tile, lane);
      // Keys past a row's position (the causal diagonal, and the zero-filled
      // keys past kv_end) score -inf; tiles wholly below the diagonal skip it.
      const bool needs_mask = key0 + kPrefillBlockN - 1 > warp_first_pos;
#pragma unroll
      for (int j = 0; j < kPrefillBlockN / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + j * 8 + 2 * t + (e % 2);
          const float scaled = s[j][e] * score_scale;
          s[j][e] = needs_mask && key > position[e / 2] ? -INFINITY : scaled;
        }
      }
      SoftmaxTile<T, kHeadDim>(s, o, row_max, row_sum, p_frag);
    }
    v_gather.Finish(v_tile);
    CpAsyncWaitAll();  // V(n)
    __syncthreads();   // ... for every thread; and every warp is done with K(n)
    const bool more = n + 1 < num_key_tiles;
    if (more) k_gather.Start(k_tile, key0 + kPrefillBlockN);
    if (active) AccumulatePv<T, kHeadDim>(o, p_frag, v_tile, lane);
    if (more) k_gather.Finish(k_tile);
  }

  T* out = static_cast<T*>(params.out);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float sum = row_sum[half];
    sum += __shfl_xor_sync(kFullMask, sum, 1);
    sum += __shfl_xor_sync(kFullMask, sum, 2);
    const int row = warp_row0 + g + 8 * half;
    if (row >= tile.num_rows) continue;
    // sum >= 1: the row's largest score contributes exp2(0), rounded exactly.
    // An FP8 cache's v_scale scales the output (its values are code * v_scale).
    const float inverse = kFp8 ? params.v_scale / sum : 1.0f / sum;
    T* dst = out +
             (static_cast<size_t>(tile.query_begin + row / tile.group) * params.num_q_heads +
              kv_head * tile.group + row % tile.group) *
                 kHeadDim +
             2 * t;
#pragma unroll
    for (int d = 0; d < kHeadDim / 8; ++d) {
      *reinterpret_cast<uint32_t*>(dst + d * 8) =
          PackFloat2<T>(o[d][2 * half] * inverse, o[d][2 * half + 1] * inverse);
    }
  }
}

template <typename T, int kFp8, int kHeadDim, int kBlockSize>
cudaError_t LaunchPrefillTyped(const PrefillAttentionParams& params, cudaStream_t stream) {
  const int group = params.num_q_heads / params.num_kv_heads;
  const long long rows = static_cast<long long>(params.max_query_len) * group;
  const long long tiles = (rows + kPrefillBlockM - 1) / kPrefillBlockM;
  if (tiles > 0x7fffffffLL || params.num_kv_heads > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(tiles), params.num_kv_heads, params.num_seqs);
  PrefillAttentionKernel<T, kFp8, kHeadDim, kBlockSize>
      <<<grid, kPrefillThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

// Maps the runtime head dim and block size to the compiled variants for
// element type T over a T (or, kFp8, an FP8 E4M3) cache;
// cudaErrorInvalidValue for anything else.
template <typename T, int kFp8>
cudaError_t LaunchPrefillForType(const PrefillAttentionParams& params, cudaStream_t stream) {
  if (params.head_dim == 64 && params.block_size == 16) {
    return LaunchPrefillTyped<T, kFp8, 64, 16>(params, stream);
  }
  if (params.head_dim == 64 && params.block_size == 32) {
    return LaunchPrefillTyped<T, kFp8, 64, 32>(params, stream);
  }
  if (params.head_dim == 128 && params.block_size == 16) {
    return LaunchPrefillTyped<T, kFp8, 128, 16>(params, stream);
  }
  if (params.head_dim == 128 && params.block_size == 32) {
    return LaunchPrefillTyped<T, kFp8, 128, 32>(params, stream);
  }
  return cudaErrorInvalidValue;
}

// Instantiated in prefill_attention_{bf16,f16}{,_fp8,_e5m2}.cu only.
extern template cudaError_t LaunchPrefillForType<__nv_bfloat16, false>(
    const PrefillAttentionParams&, cudaStream_t);
extern template cudaError_t LaunchPrefillForType<__half, false>(const PrefillAttentionParams&,
                                                                cudaStream_t);
extern template cudaError_t LaunchPrefillForType<__nv_bfloat16, true>(const PrefillAttentionParams&,
                                                                      cudaStream_t);
extern template cudaError_t LaunchPrefillForType<__half, true>(const PrefillAttentionParams&,
                                                               cudaStream_t);

extern template cudaError_t LaunchPrefillForType<__nv_bfloat16, kKvFp8E5M2>(
    const PrefillAttentionParams&, cudaStream_t);
extern template cudaError_t LaunchPrefillForType<__half, kKvFp8E5M2>(const PrefillAttentionParams&,
                                                                     cudaStream_t);

}  // namespace pagoda::kernels::attention_internal

#endif  // PAGODA_KERNELS_ATTENTION_PREFILL_ATTENTION_CUH_
