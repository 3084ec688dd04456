// Attention over the paged KV cache: decode (one query token per sequence) and
// prefill (many query tokens per sequence, causal, after an optional cached
// prefix). FlashInfer style: one plain Params struct per kernel, a host-side
// plan that fixes the work partition, and a launcher returning cudaError_t.
//
// KV cache layout (DESIGN.md, FlashInfer "HND"): per layer, K and V are each
// [num_blocks, num_kv_heads, block_size, head_dim], row-major and contiguous.
// Token t of a sequence lives in physical block block_table[t / block_size] at
// row t % block_size.
//
// Supported (anything else is rejected by the Check* functions and makes the
// launchers return cudaErrorInvalidValue without launching):
//   q, k_cache, v_cache 16-byte aligned (16-byte vector loads)
//   dtype      ScalarType::kBF16, kF16 (accumulation is always f32)
//   kv_storage kDType (the cache in dtype), kFp8E4M3 or kFp8E5M2 (one byte
//              an element, widened to dtype exactly in registers; finite
//              positive scales)
//   head_dim   64, 128
//   block_size 16, 32
//   num_q_heads / num_kv_heads in [1, 8], num_q_heads divisible by num_kv_heads
//
// Thread safety: all functions are pure or only enqueue work on the given
// stream; they may be called from any thread.
#ifndef PAGODA_KERNELS_ATTENTION_PAGED_ATTENTION_H_
#define PAGODA_KERNELS_ATTENTION_PAGED_ATTENTION_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/kernel_status.h"
#include "kernels/kv_cache_storage.h"
#include "kernels/scalar_type.h"

namespace pagoda::kernels {

// Decode attention: out[s, h, :] = softmax(scale * q[s, h] . K_s^T) V_s over
// the first context_lens[s] tokens of sequence s, with query head h reading kv
// head h / (num_q_heads / num_kv_heads).
// All pointers are device pointers owned by the caller and must stay valid
// until the launched work completes. Tensors are contiguous.
struct DecodeAttentionParams {
  ScalarType dtype = ScalarType::kBF16;
  int num_seqs = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;
  int max_blocks_per_seq = 0;  // row stride of block_tables
  float softmax_scale = 0.0f;  // usually 1 / sqrt(head_dim)

  // How the cache holds K and V (kernels/kv_cache_storage.h). kFp8E4M3,
  // kFp8E5M2: codes read as code * k_scale and code * v_scale (k_scale folded into
  // the softmax scale, v_scale into the output); dtype is q's and out's.
  KvCacheStorage kv_storage = KvCacheStorage::kDType;
  float k_scale = 1.0f;
  float v_scale = 1.0f;

  const void* q = nullptr;                // [num_seqs, num_q_heads, head_dim]
  int64_t q_token_stride = 0;             // see QueryTokenStride
  const void* k_cache = nullptr;          // [num_blocks, num_kv_heads, block_size, head_dim]
  const void* v_cache = nullptr;          // same shape as k_cache
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  const int32_t* context_lens = nullptr;  // [num_seqs]; REQUIRES: each in
                                          // [1, max_blocks_per_seq * block_size]
  void* out = nullptr;                    // [num_seqs, num_q_heads, head_dim]
};

// Which prefill kernel runs. kMmaSync (FlashAttention-2 on mma.sync, every
// sm_80+ GPU) is the default; kWgmma is the Hopper kernel (wgmma, TMA loads
// of the pages, warp specialization; prefill_attention_wgmma.cu), only on
// compute capability 9.0 and only over a bf16/f16 cache: elsewhere its launch
// returns cudaErrorInvalidValue without launching
// (PrefillKernelRunsOnDevice says beforehand).
enum class PrefillKernel {
  kMmaSync,
  kWgmma,
};

// Prefill attention over the paged cache, variable-length batch. Sequence s
// has query tokens q[query_start[s] .. query_start[s+1]) whose K/V are already
// in the cache as the LAST num_queries tokens of its context_lens[s] tokens, so
// query i sits at position context_lens[s] - num_queries + i and attends to
// positions [0, that position] (causal; a cached prefix is simply attended).
struct PrefillAttentionParams {
  ScalarType dtype = ScalarType::kBF16;
  int num_seqs = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;
  int max_blocks_per_seq = 0;
  int max_query_len = 0;  // REQUIRES: >= every sequence's query count; sizes the grid
  float softmax_scale = 0.0f;

  // How the cache holds K and V (kernels/kv_cache_storage.h). kFp8E4M3,
  // kFp8E5M2: codes read as code * k_scale and code * v_scale (k_scale folded into
  // the softmax scale, v_scale into the output); dtype is q's and out's.
  KvCacheStorage kv_storage = KvCacheStorage::kDType;
  float k_scale = 1.0f;
  float v_scale = 1.0f;

  PrefillKernel kernel = PrefillKernel::kMmaSync;
  // Blocks in k_cache and v_cache, 0 when unknown. kWgmma bounds its TMA
  // loads by it (a block id past it reads zeros); the others ignore it.
  int num_cache_blocks = 0;

  const void* q = nullptr;               // [total_queries, num_q_heads, head_dim]
  int64_t q_token_stride = 0;            // see QueryTokenStride
  const int32_t* query_start = nullptr;  // [num_seqs + 1], nondecreasing, [0] = 0
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  const int32_t* context_lens = nullptr;  // [num_seqs]; REQUIRES: >= query count,
                                          // <= max_blocks_per_seq * block_size
  void* out = nullptr;                    // [total_queries, num_q_heads, head_dim]
};

// Elements between two query tokens' q rows: q_token_stride, or when that is
// 0 num_q_heads * head_dim (contiguous). A fused QKV product's rows hold each
// token's q, k and v heads, so its q rows are (num_q_heads + 2 * num_kv_heads)
// * head_dim apart. REQUIRES: >= num_q_heads * head_dim and a multiple of 8
// (rows stay 16-byte aligned). The output is always contiguous.
template <typename Params>
int64_t QueryTokenStride(const Params& p) {
  return p.q_token_stride != 0 ? p.q_token_stride
                               : static_cast<int64_t>(p.num_q_heads) * p.head_dim;
}

// How decode splits each context across thread blocks.
enum class SplitKMode {
  kAuto,    // the planner decides from batch, kv heads, context and SM count
  kNever,   // one thread block per (sequence, kv head) covers the whole context
  kAlways,  // always split into partitions (tests; long-context benchmarks)
};

// Whether each warp issues its next K/V loads before computing on the
// current ones (GQA groups up to 4; the 8-head variant has no registers to
// spare). It costs registers (168 instead of 128 for a group of 4: 3 resident
// blocks per SM instead of 4), which pays only when the grid is several waves
// deep and the memory fast enough to want the extra loads in flight: it won
// 2-5 points of copy bandwidth on an H200 and lost 3-5 on an H100
// (kernels/attention/NOTES.md has the figures).
enum class PrefetchMode {
  kAuto,  // the planner decides from the thread blocks, SMs and memory bandwidth
  kNever,
  kAlways,
};

struct DecodePlanOptions {
  SplitKMode split_k = SplitKMode::kAuto;
  int partition_size = 512;  // tokens per partition when split; multiple of 64
  PrefetchMode prefetch = PrefetchMode::kAuto;
  // The device's peak memory bandwidth (PeakMemoryGbps), 0 when unknown.
  double peak_memory_gbps = 0;
};

// Peak memory bandwidth in GB/s from the device's memory clock (kHz,
// cudaDevAttrMemoryClockRate) and bus width (bits,
// cudaDevAttrGlobalMemoryBusWidth): two transfers per clock. 3352 for an H100
// SXM (2619 MHz x 5120 bits), about 4900 for an H200.
double PeakMemoryGbps(int memory_clock_khz, int bus_width_bits);

// The work partition of one decode launch. Depends only on host-known shapes
// and bounds, never on device data, so a plan made for max_context_len can be
// reused for every step (and inside a CUDA graph) whose contexts fit.
struct DecodePlan {
  int partition_size = 0;      // 0: no split (each block covers a whole context)
  int max_num_partitions = 1;  // grid depth; ceil(max_context_len / partition_size)
  size_t workspace_bytes = 0;  // device scratch the launch needs (0 when not split)
  bool prefetch = false;       // see PrefetchMode
};

// Validates a decode configuration. Not ok: code cudaErrorInvalidValue and a
// message naming what is unsupported.
KernelStatus CheckDecodeSupported(const DecodeAttentionParams& params);
// Validates a prefill configuration; same contract as CheckDecodeSupported.
KernelStatus CheckPrefillSupported(const PrefillAttentionParams& params);

// Plans a decode launch. REQUIRES: max_context_len >= 1, num_sms >= 1 (132 on
// an H200; read it with cudaDeviceGetAttribute(cudaDevAttrMultiProcessorCount)).
// Pure host code: no CUDA calls.
DecodePlan PlanDecodeAttention(int num_seqs, int num_q_heads, int num_kv_heads, int head_dim,
                               int max_context_len, int num_sms,
                               const DecodePlanOptions& options = {});

// Enqueues decode attention on `stream`. `workspace` is device memory of at
// least plan.workspace_bytes (may be null when that is 0), used only by this
// launch until it completes. REQUIRES: every context_lens[s] <= the
// max_context_len the plan was made for (not checkable on the host). A split
// plan made for fewer sequences or query heads (too small a workspace) is
// rejected. Returns cudaErrorInvalidValue for an unsupported configuration,
// otherwise the launch error, if any.
cudaError_t LaunchDecodeAttention(const DecodeAttentionParams& params, const DecodePlan& plan,
                                  void* workspace, cudaStream_t stream);

// Whether `kernel` can run on CUDA device `device` over a cache stored as
// `kv_storage` (kWgmma: compute capability 9.0 and a bf16/f16 cache). False
// when the device cannot be queried.
bool PrefillKernelRunsOnDevice(PrefillKernel kernel, int device, KvCacheStorage kv_storage);

// Enqueues prefill attention on `stream`. Returns cudaErrorInvalidValue for an
// unsupported configuration, otherwise the launch error, if any.
cudaError_t LaunchPrefillAttention(const PrefillAttentionParams& params, cudaStream_t stream);

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_ATTENTION_PAGED_ATTENTION_H_
