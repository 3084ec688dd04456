// Prefill attention for Hopper (sm_90a): the FlashAttention-3 scheme over the
// paged KV cache. Same contract as PrefillAttentionKernel (causal, variable
// length batch, queries after a cached prefix, GQA rows = (query token, head
// of the kv group)), bf16/f16 over a cache of the same dtype. Built for
// sm_90a only (wgmma, setmaxnreg); selected by PrefillKernel::kWgmma.
//
// One thread block of three warpgroups per (128-row tile, kv head, sequence):
//   warpgroup 0, the producer: gives its registers away (setmaxnreg) and one
//     thread streams K and V tiles of 128 keys into a two-stage ring in
//     shared memory with TMA, one box per (page, 64-column slab), the page's
//     physical block id from the block table as the box's outermost
//     coordinate. Full/empty mbarriers per stage and per K / V hand the
//     buffers over.
//   warpgroups 1 and 2, the consumers: 64 rows each. S = Q.K^T by wgmma from
//     shared memory (Q staged once, swizzled by hand), masked online softmax
//     on the accumulators, O += P.V by wgmma with P in registers and V read
//     transposed from shared memory. The next tile's S is issued before this
//     tile's P.V is waited for, so the softmax overlaps the tensor cores.
// kernels/attention/NOTES.md has the design (tile sizes, registers, the
// rescale) and wgmma_sm90.cuh the layouts.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/attention/attention_common.cuh"
#include "kernels/attention/mma_sm80.cuh"  // PackFloat2
#include "kernels/attention/paged_attention.h"
#include "kernels/attention/prefill_attention_wgmma.h"
#include "kernels/attention/wgmma_sm90.cuh"

namespace pagoda::kernels::attention_internal {
namespace {

constexpr int kWgBlockM = 128;  // rows per thread block, 64 per consumer warpgroup
constexpr int kWgBlockN = 128;  // keys per K/V tile
constexpr int kWgStages = 2;
constexpr int kWgConsumers = 2;  // consumer warpgroups
constexpr int kWgThreads = 128 * (1 + kWgConsumers);
constexpr int kWgProducerRegisters = 40;
constexpr int kWgConsumerRegisters = 232;
constexpr int kSlabBytes = 128 * 128;  // 128 rows (Q rows or keys) x 64 elements
// Named barriers (0 is __syncthreads): 1 + consumer, then both consumers.
constexpr int kConsumersBarrier = 1 + kWgConsumers;

// Byte offsets inside the 1024-byte aligned dynamic shared memory.
template <int kHeadDim>
struct WgSmem {
  static constexpr int kSlabs = kHeadDim / 64;
  static constexpr int kTileBytes = kSlabs * kSlabBytes;  // Q, or one K or V stage
  static constexpr int kQ = 0;
  static constexpr int kK = kTileBytes;
  static constexpr int kV = kK + kWgStages * kTileBytes;
  static constexpr int kBarriers = kV + kWgStages * kTileBytes;
  static constexpr int kBytes = kBarriers + 4 * kWgStages * 8;
  static constexpr int kAllocBytes = kBytes + 1024;  // room to align the base
};

// The four mbarriers of each stage: K and V landed (full; the producer's
// expect_tx arrival plus the bytes), K and V free again (empty; one arrival
// per consumer warp).
struct WgBarriers {
  uint32_t base;
  __device__ __forceinline__ uint32_t KFull(int stage) const { return base + 8 * stage; }
  __device__ __forceinline__ uint32_t VFull(int stage) const {
    return base + 8 * (kWgStages + stage);
  }
  __device__ __forceinline__ uint32_t KEmpty(int stage) const {
    return base + 8 * (2 * kWgStages + stage);
  }
  __device__ __forceinline__ uint32_t VEmpty(int stage) const {
    return base + 8 * (3 * kWgStages + stage);
  }
};

// What every warpgroup knows about its thread block's rows and keys.
struct WgTile {
  int group;        // query heads per kv head
  int query_begin;  // first query token of the sequence
  int num_rows;     // query tokens x group
  int first_pos;    // position of the sequence's first query token
  int row0;         // first row of the thread block
  int kv_end;       // keys the thread block needs: [0, kv_end)
  int num_key_tiles;
};

// The producer thread: K and V of every key tile, through the block table.
// Pages at or past kv_end are not loaded (their table entries may be stale);
// the consumers zero what they would have held.
template <int kHeadDim, int kBlockSize>
__device__ void ProduceKvTiles(const CUtensorMap* k_map, const CUtensorMap* v_map,
                               const int32_t* block_table, int kv_head, const WgTile& tile,
                               uint32_t k_smem, uint32_t v_smem, const WgBarriers& bars) {
  using Smem = WgSmem<kHeadDim>;
  constexpr int kPagesPerTile = kWgBlockN / kBlockSize;
  constexpr uint32_t kPageSlabBytes = kBlockSize * 128;
  constexpr uint32_t kPageBytes = kPageSlabBytes * Smem::kSlabs;
  PrefetchTensorMap(k_map);
  PrefetchTensorMap(v_map);
  for (int n = 0; n < tile.num_key_tiles; ++n) {
    const int stage = n % kWgStages;
    const uint32_t parity = (n / kWgStages) & 1;
    const int first_page = n * kPagesPerTile;
    const int pages =
        min(kPagesPerTile, (tile.kv_end - n * kWgBlockN + kBlockSize - 1) / kBlockSize);
    for (int which = 0; which < 2; ++which) {
      const bool is_k = which == 0;
      const uint32_t full = is_k ? bars.KFull(stage) : bars.VFull(stage);
      MbarrierWaitOrTrap(is_k ? bars.KEmpty(stage) : bars.VEmpty(stage), parity ^ 1);
      MbarrierArriveExpectTx(full, pages * kPageBytes);
      const uint32_t dst = (is_k ? k_smem : v_smem) + stage * Smem::kTileBytes;
      for (int page = 0; page < pages; ++page) {
        const int block = block_table[first_page + page];
#pragma unroll
        for (int slab = 0; slab < Smem::kSlabs; ++slab) {
          TmaLoad4d(dst + slab * kSlabBytes + page * kPageSlabBytes, is_k ? k_map : v_map, full,
                    slab * 64, 0, kv_head, block);
        }
      }
    }
  }
  // The last tiles' loads must land (the consumers wait for them without a
  // watchdog): a transaction count that never completes traps here. Earlier
  // tiles were consumed before their stages were refilled.
  for (int n = max(0, tile.num_key_tiles - kWgStages); n < tile.num_key_tiles; ++n) {
    const uint32_t parity = (n / kWgStages) & 1;
    MbarrierWaitOrTrap(bars.KFull(n % kWgStages), parity);
    MbarrierWaitOrTrap(bars.VFull(n % kWgStages), parity);
  }
}

// Stages this warpgroup's 64 rows of Q (zero past the last row) in the
// swizzled slabs, then makes them visible to wgmma.
template <typename T, int kHeadDim>
__device__ __forceinline__ void StageQuery(uint8_t* q_smem, const PrefillAttentionParams& params,
                                           const WgTile& tile, int kv_head, int consumer,
                                           int thread) {
  constexpr int kChunksPerRow = kHeadDim / 8;
  const T* q = static_cast<const T*>(params.q);
  for (int index = thread; index < 64 * kChunksPerRow; index += 128) {
    const int local_row = 64 * consumer + index / kChunksPerRow;
    const int chunk = index % kChunksPerRow;
    const int row = tile.row0 + local_row;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (row < tile.num_rows) {
      const T* src =
          q + static_cast<size_t>(tile.query_begin + row / tile.group) * params.q_token_stride +
          static_cast<size_t>(kv_head * tile.group + row % tile.group) * kHeadDim + chunk * 8;
      value = LoadReadOnly16(src);
    }
    const int offset =
        (chunk / 8) * kSlabBytes + local_row * 128 + (((chunk % 8) ^ (local_row % 8)) * 16);
    *reinterpret_cast<uint4*>(q_smem + offset) = value;
  }
  FenceProxyAsyncShared();
  NamedBarrierSync(1 + consumer, 128);
}

// Zeroes V rows [kv_end - key0, kWgBlockN) of the last tile's stage: keys
// past the context (a page's unwritten tail, or pages never loaded) must not
// be NaN, since P = 0 times NaN is NaN. Both consumers split the rows and
// meet at a barrier before either reads the tile.
template <int kHeadDim>
__device__ __forceinline__ void ZeroVTail(uint8_t* v_stage, int first_row, int consumer_thread) {
  constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks; zeroing ignores the swizzle
  const int chunks = (kWgBlockN - first_row) * kChunksPerRow;
  for (int index = consumer_thread; index < chunks; index += 128 * kWgConsumers) {
    const int row = first_row + index / kChunksPerRow;
    const int chunk = index % kChunksPerRow;
    *reinterpret_cast<uint4*>(v_stage + (chunk / 8) * kSlabBytes + row * 128 + (chunk % 8) * 16) =
        make_uint4(0, 0, 0, 0);
  }
  FenceProxyAsyncShared();
  NamedBarrierSync(kConsumersBarrier, 128 * kWgConsumers);
}

// One consumer warp's arrival on an empty barrier, once its wgmmas reading
// the buffer have completed.
__device__ __forceinline__ void ReleaseBuffer(uint32_t empty, int lane) {
  __syncwarp();
  if (lane == 0) MbarrierArrive(empty);
}

// One consumer warpgroup: 64 rows, all key tiles of the thread block.
template <typename T, int kHeadDim>
struct WgConsumer {
  using Smem = WgSmem<kHeadDim>;
  static constexpr int kOutRegs = kHeadDim / 2;
  static constexpr int kScoreRegs = kWgBlockN / 2;

  const PrefillAttentionParams& params;
  const WgTile& tile;
  WgBarriers bars;
  uint8_t* smem;
  uint32_t smem_base;
  int kv_head;
  int consumer;  // 0 or 1
  int thread;    // in the warpgroup
  int lane;
  int position[2];  // of this lane's rows g and g + 8 (-1: padding)
  int first_pos, last_pos;
  bool has_rows;
  float score_scale;

  float o[kOutRegs];
  float s[kScoreRegs];
  uint32_t p[kWgBlockN / 16][4];
  float row_max[2];
  float row_sum[2];
  float correction[2];

  __device__ __forceinline__ uint64_t QueryDescriptor(int k_step) const {
    return SwizzledDescriptor(
        smem_base + Smem::kQ + (k_step / 4) * kSlabBytes + consumer * 64 * 128 + (k_step % 4) * 32,
        16, 1024);
  }
  __device__ __forceinline__ uint64_t KeyDescriptor(int stage, int k_step) const {
    return SwizzledDescriptor(smem_base + Smem::kK + stage * Smem::kTileBytes +
                                  (k_step / 4) * kSlabBytes + (k_step % 4) * 32,
                              16, 1024);
  }
  __device__ __forceinline__ uint64_t ValueDescriptor(int stage, int key_step) const {
    return SwizzledDescriptor(smem_base + Smem::kV + stage * Smem::kTileBytes + key_step * 16 * 128,
                              kSlabBytes, 1024);
  }

  __device__ __forceinline__ void IssueScores(int stage) {
    WgmmaFence();
#pragma unroll
    for (int k_step = 0; k_step < kHeadDim / 16; ++k_step) {
      WgmmaSS<T, kWgBlockN>(s, QueryDescriptor(k_step), KeyDescriptor(stage, k_step), k_step > 0);
    }
    WgmmaCommitGroup();
  }
  __device__ __forceinline__ void IssueValues(int stage) {
    WgmmaFence();
#pragma unroll
    for (int key_step = 0; key_step < kWgBlockN / 16; ++key_step) {
      WgmmaRS<T, kHeadDim>(o, p[key_step], ValueDescriptor(stage, key_step), 1);
    }
    WgmmaCommitGroup();
  }

  // Masks and scales the scores of the tile at key0, updates the running
  // maxima and sums, and leaves the probabilities (f32) in s; the rescale of
  // o waits in `correction` until the P.V in flight has landed.
  __device__ __forceinline__ void Softmax(int key0) {
    PinRegisters(s);
    const bool needs_mask = key0 + kWgBlockN - 1 > first_pos;
    const int t = lane % 4;
#pragma unroll
    for (int j = 0; j < kWgBlockN / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + j * 8 + 2 * t + (e % 2);
        const float scaled = s[4 * j + e] * score_scale;
        s[4 * j + e] = needs_mask && key > position[e / 2] ? -INFINITY : scaled;
      }
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float m = row_max[half];
#pragma unroll
      for (int j = 0; j < kWgBlockN / 8; ++j) {
        m = fmaxf(m, fmaxf(s[4 * j + 2 * half], s[4 * j + 2 * half + 1]));
      }
      m = fmaxf(m, __shfl_xor_sync(kFullMask, m, 1));
      m = fmaxf(m, __shfl_xor_sync(kFullMask, m, 2));
      correction[half] = exp2f(row_max[half] - m);
      row_max[half] = m;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kWgBlockN / 8; ++j) {
        s[4 * j + 2 * half] = exp2f(s[4 * j + 2 * half] - m);
        s[4 * j + 2 * half + 1] = exp2f(s[4 * j + 2 * half + 1] - m);
        sum += s[4 * j + 2 * half] + s[4 * j + 2 * half + 1];
      }
      row_sum[half] = row_sum[half] * correction[half] + sum;
    }
  }

  // After the previous P.V has completed: rescales o and packs s into P.
  __device__ __forceinline__ void RescaleAndPack() {
    // Both pinned after the wait: o is the finished P.V, and new P must not be
    // written while the previous one is still an operand in flight.
    PinRegisters(o);
    PinRegisters(s);
#pragma unroll
    for (int i = 0; i < kOutRegs; ++i) o[i] *= correction[(i % 4) / 2];
#pragma unroll
    for (int step = 0; step < kWgBlockN / 16; ++step) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        p[step][r] = PackFloat2<T>(s[8 * step + 2 * r], s[8 * step + 2 * r + 1]);
      }
    }
  }

  __device__ __forceinline__ void WaitFull(uint32_t bar, int n) {
    MbarrierWait(bar, (n / kWgStages) & 1);
  }

  // The last tile's V: zero its tail (both consumers, once) when the keys
  // end inside it.
  __device__ __forceinline__ void PrepareLastValues(int stage) {
    const int last_key0 = (tile.num_key_tiles - 1) * kWgBlockN;
    if (tile.kv_end - last_key0 < kWgBlockN) {
      ZeroVTail<kHeadDim>(smem + Smem::kV + stage * Smem::kTileBytes, tile.kv_end - last_key0,
                          consumer * 128 + thread);
    }
  }

  __device__ __forceinline__ void Run() {
#pragma unroll
    for (int i = 0; i < kOutRegs; ++i) o[i] = 0.0f;
    row_max[0] = row_max[1] = kNoMax;
    row_sum[0] = row_sum[1] = 0.0f;
    // Tiles with a key some row of this warpgroup sees; the rest are only
    // waited for and released (the ring advances for both consumers).
    const int own_tiles = has_rows ? last_pos / kWgBlockN + 1 : 0;
    if (own_tiles > 0) {
      WaitFull(bars.KFull(0), 0);
      IssueScores(0);
      WgmmaWaitGroup<0>();
      ReleaseBuffer(bars.KEmpty(0), lane);
      Softmax(0);
      RescaleAndPack();
    }
    for (int n = 1; n < own_tiles; ++n) {
      const int stage = n % kWgStages;
      const int previous = (n - 1) % kWgStages;
      WaitFull(bars.KFull(stage), n);
      IssueScores(stage);
      WaitFull(bars.VFull(previous), n - 1);  // never the last tile: no tail to zero
      IssueValues(previous);
      WgmmaWaitGroup<1>();  // the scores (committed first)
      ReleaseBuffer(bars.KEmpty(stage), lane);
      Softmax(n * kWgBlockN);
      WgmmaWaitGroup<0>();  // the previous P.V
      ReleaseBuffer(bars.VEmpty(previous), lane);
      RescaleAndPack();
    }
    if (own_tiles > 0) {
      const int n = own_tiles - 1;
      const int stage = n % kWgStages;
      WaitFull(bars.VFull(stage), n);
      if (n == tile.num_key_tiles - 1) PrepareLastValues(stage);
      IssueValues(stage);
      WgmmaWaitGroup<0>();
      ReleaseBuffer(bars.VEmpty(stage), lane);
    }
    for (int n = own_tiles; n < tile.num_key_tiles; ++n) {
      const int stage = n % kWgStages;
      WaitFull(bars.KFull(stage), n);
      ReleaseBuffer(bars.KEmpty(stage), lane);
      WaitFull(bars.VFull(stage), n);
      if (n == tile.num_key_tiles - 1) PrepareLastValues(stage);
      ReleaseBuffer(bars.VEmpty(stage), lane);
    }
    PinRegisters(o);
  }

  __device__ __forceinline__ void Store(int warp_row0) const {
    T* out = static_cast<T*>(params.out);
    const int g = lane / 4;
    const int t = lane % 4;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float sum = row_sum[half];
      sum += __shfl_xor_sync(kFullMask, sum, 1);
      sum += __shfl_xor_sync(kFullMask, sum, 2);
      const int row = warp_row0 + g + 8 * half;
      if (row >= tile.num_rows) continue;
      // sum >= 1: the row's largest score contributes exp2(0).
      const float inverse = 1.0f / sum;
      T* dst = out +
               (static_cast<size_t>(tile.query_begin + row / tile.group) * params.num_q_heads +
                kv_head * tile.group + row % tile.group) *
                   kHeadDim +
               2 * t;
#pragma unroll
      for (int j = 0; j < kHeadDim / 8; ++j) {
        *reinterpret_cast<uint32_t*>(dst + j * 8) =
            PackFloat2<T>(o[4 * j + 2 * half] * inverse, o[4 * j + 2 * half + 1] * inverse);
      }
    }
  }
};

template <typename T, int kHeadDim, int kBlockSize>
__global__ void __launch_bounds__(kWgThreads, 1)
    PrefillWgmmaKernel(const __grid_constant__ PrefillAttentionParams params,
                       const __grid_constant__ CUtensorMap k_map,
                       const __grid_constant__ CUtensorMap v_map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Smem = WgSmem<kHeadDim>;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw_base = SharedAddress(smem_raw);
  const uint32_t smem_base = (raw_base + 1023) & ~1023u;
  uint8_t* smem = smem_raw + (smem_base - raw_base);
  const WgBarriers bars{smem_base + Smem::kBarriers};

  // Row tiles in reverse: the last rows see the most keys, so they start first.
  const int row_tile = gridDim.x - 1 - blockIdx.x;
  const int kv_head = blockIdx.y;
  const int seq = blockIdx.z;
  WgTile tile;
  tile.group = params.num_q_heads / params.num_kv_heads;
  tile.query_begin = params.query_start[seq];
  const int num_queries = params.query_start[seq + 1] - tile.query_begin;
  tile.num_rows = num_queries * tile.group;
  tile.row0 = row_tile * kWgBlockM;
  if (tile.row0 >= tile.num_rows) return;  // the whole block, before any barrier
  tile.first_pos = params.context_lens[seq] - num_queries;
  tile.kv_end = tile.first_pos + (min(tile.row0 + kWgBlockM, tile.num_rows) - 1) / tile.group + 1;
  tile.num_key_tiles = (tile.kv_end + kWgBlockN - 1) / kWgBlockN;

  if (threadIdx.x == 0) {
    for (int stage = 0; stage < kWgStages; ++stage) {
      MbarrierInit(bars.KFull(stage), 1);
      MbarrierInit(bars.VFull(stage), 1);
      MbarrierInit(bars.KEmpty(stage), 4 * kWgConsumers);
      MbarrierInit(bars.VEmpty(stage), 4 * kWgConsumers);
    }
    FenceBarrierInit();
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    SetMaxRegistersDecrease<kWgProducerRegisters>();
    if (threadIdx.x == 0) {
      const int32_t* block_table =
          params.block_tables + static_cast<size_t>(seq) * params.max_blocks_per_seq;
      ProduceKvTiles<kHeadDim, kBlockSize>(&k_map, &v_map, block_table, kv_head, tile,
                                           smem_base + Smem::kK, smem_base + Smem::kV, bars);
    }
    return;
  }
  SetMaxRegistersIncrease<kWgConsumerRegisters>();
  const int consumer = warpgroup - 1;
  const int thread = threadIdx.x % 128;
  StageQuery<T, kHeadDim>(smem + Smem::kQ, params, tile, kv_head, consumer, thread);

  WgConsumer<T, kHeadDim> c{params, tile, bars, smem, smem_base, kv_head, consumer, thread};
  c.lane = thread % 32;
  const int consumer_row0 = tile.row0 + 64 * consumer;
  const int warp_row0 = consumer_row0 + 16 * (thread / 32);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = warp_row0 + c.lane / 4 + 8 * half;
    c.position[half] = row < tile.num_rows ? tile.first_pos + row / tile.group : -1;
  }
  c.has_rows = consumer_row0 < tile.num_rows;
  c.first_pos = c.has_rows ? tile.first_pos + consumer_row0 / tile.group : -1;
  c.last_pos =
      c.has_rows ? tile.first_pos + (min(consumer_row0 + 63, tile.num_rows - 1)) / tile.group : -1;
  c.score_scale = params.softmax_scale * kLog2e;
  c.Run();
  if (c.has_rows) c.Store(warp_row0);
#endif
}

// cuTensorMapEncodeTiled through the runtime's driver entry point (no link
// against libcuda); null when the driver has none.
PFN_cuTensorMapEncodeTiled_v12000 TensorMapEncoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult query = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000,
                                         cudaEnableDefault, &query) != cudaSuccess ||
        query != cudaDriverEntryPointSuccess) {
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(function);
  }();
  return encoder;
}

// The cache [num_blocks, num_kv_heads, block_size, head_dim] as a 4-D tensor
// (innermost first) whose box is one page of one head, 64 columns wide (one
// 128-byte swizzle span). Without num_cache_blocks the block dimension is
// bounded by int32 block ids and by 2^40 bytes of cache (well past any GPU's
// memory; it keeps the tensor's extent inside what TMA addresses).
bool EncodeKvTensorMap(CUtensorMap* map, const void* cache, const PrefillAttentionParams& p) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = TensorMapEncoder();
  if (encode == nullptr) return false;
  const cuuint64_t row_bytes = static_cast<cuuint64_t>(p.head_dim) * 2;
  const cuuint64_t strides[3] = {row_bytes, row_bytes * p.block_size,
                                 row_bytes * p.block_size * p.num_kv_heads};
  const cuuint64_t unknown_blocks =
      std::min<cuuint64_t>(INT_MAX, (cuuint64_t{1} << 40) / strides[2]);
  const cuuint64_t dims[4] = {
      static_cast<cuuint64_t>(p.head_dim), static_cast<cuuint64_t>(p.block_size),
      static_cast<cuuint64_t>(p.num_kv_heads),
      p.num_cache_blocks > 0 ? static_cast<cuuint64_t>(p.num_cache_blocks) : unknown_blocks};
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(p.block_size), 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUtensorMapDataType type = p.dtype == ScalarType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                                : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  return encode(map, type, 4, const_cast<void*>(cache), dims, strides, box, element_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Sets `kernel`'s shared-memory limit once per device (the attribute belongs
// to a device's context; setting it every launch would add host time that a
// short prefill's timing sees). Devices past 63 set it every launch.
template <typename Kernel>
cudaError_t AllowSharedMemoryOnce(Kernel kernel, int bytes, int device,
                                  std::atomic<uint64_t>& done_devices) {
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (done_devices.load(std::memory_order_acquire) & bit) != 0) return cudaSuccess;
  const cudaError_t error =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (error == cudaSuccess) done_devices.fetch_or(bit, std::memory_order_release);
  return error;
}

template <typename T, int kHeadDim, int kBlockSize>
cudaError_t LaunchWgmmaTyped(const PrefillAttentionParams& params, int device,
                             const CUtensorMap& k_map, const CUtensorMap& v_map,
                             cudaStream_t stream) {
  const auto kernel = PrefillWgmmaKernel<T, kHeadDim, kBlockSize>;
  constexpr int kSmemBytes = WgSmem<kHeadDim>::kAllocBytes;
  static std::atomic<uint64_t> configured_devices{0};
  const cudaError_t attribute =
      AllowSharedMemoryOnce(kernel, kSmemBytes, device, configured_devices);
  if (attribute != cudaSuccess) return attribute;
  const int group = params.num_q_heads / params.num_kv_heads;
  const long long rows = static_cast<long long>(params.max_query_len) * group;
  const long long tiles = (rows + kWgBlockM - 1) / kWgBlockM;
  if (tiles > 0x7fffffffLL || params.num_kv_heads > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(tiles), params.num_kv_heads, params.num_seqs);
  kernel<<<grid, kWgThreads, kSmemBytes, stream>>>(params, k_map, v_map);
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchWgmmaForType(const PrefillAttentionParams& params, int device,
                               const CUtensorMap& k_map, const CUtensorMap& v_map,
                               cudaStream_t stream) {
  const int d = params.head_dim;
  const int bs = params.block_size;
  if (d == 64 && bs == 16) return LaunchWgmmaTyped<T, 64, 16>(params, device, k_map, v_map, stream);
  if (d == 64 && bs == 32) return LaunchWgmmaTyped<T, 64, 32>(params, device, k_map, v_map, stream);
  if (d == 128 && bs == 16)
    return LaunchWgmmaTyped<T, 128, 16>(params, device, k_map, v_map, stream);
  if (d == 128 && bs == 32)
    return LaunchWgmmaTyped<T, 128, 32>(params, device, k_map, v_map, stream);
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t LaunchPrefillWgmma(const PrefillAttentionParams& params, cudaStream_t stream) {
  if (params.kv_storage != KvCacheStorage::kDType) return cudaErrorInvalidValue;
  int device = 0;
  int major = 0;
  int minor = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error == cudaSuccess) {
    error = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  }
  if (error == cudaSuccess) {
    error = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  }
  if (error != cudaSuccess) return error;
  if (major != 9 || minor != 0) return cudaErrorInvalidValue;  // sm_90a code only
  CUtensorMap k_map;
  CUtensorMap v_map;
  if (!EncodeKvTensorMap(&k_map, params.k_cache, params) ||
      !EncodeKvTensorMap(&v_map, params.v_cache, params)) {
    return cudaErrorInvalidValue;
  }
  switch (params.dtype) {
    case ScalarType::kBF16:
      return LaunchWgmmaForType<__nv_bfloat16>(params, device, k_map, v_map, stream);
    case ScalarType::kF16:
      return LaunchWgmmaForType<__half>(params, device, k_map, v_map, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace pagoda::kernels::attention_internal
