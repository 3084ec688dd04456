#ifndef PAGODA_WORKER_CPU_CPU_ATTENTION_H_
#define PAGODA_WORKER_CPU_CPU_ATTENTION_H_

// Paged attention of the CPU backend: one work item (a sequence and a KV
// head) at a time, blocked or plain, over the paged KV cache.

#include <cstdint>

#include "worker/backend.h"
#include "worker/cpu/simd.h"

namespace pagoda::worker {

// Paged attention of one work item: sequence item / num_kv_heads, kv head
// item % num_kv_heads, every query token of that sequence and every query
// head of the kv head's group (their K/V rows are read for all of them
// together, and no two items write the same output). The CPU backend's
// PagedAttention hands items to its threads.
//
// Two ways, the same result up to f32 rounding:
// - blocked (head_dim a multiple of 16, a level with panel kernels, and at
//   least the level's blocked_attention_min_rows query rows): queries
//   in blocks of up to 48 rows (query tokens x group heads), keys in chunks
//   of up to 64, taken in pieces of up to 16 inside one cache block. A
//   piece's scores are one gemm6x16 over its K packed once (pack16), its
//   values one gemm6x16 per 16 output columns reading V in place (widened
//   first for a 16-bit or FP8 cache); the softmax is online, once per chunk
//   (running max and sum per row, FlashAttention's rescaling), so scratch is
//   a block's, never the context's, and K/V are read once per query block
//   instead of once per query token;
// - row by row otherwise: each query token's scores over its whole context,
//   then the values weighted by their softmax.
// Both take exponentials with the level's exp_sum. An FP8 cache's k_scale
// multiplies the score scale and its v_scale the softmax weights, so the
// kernels read the codes' values and never the scales.
//
// REQUIRES: p's batch and cache are valid for the step (FlattenStepPlan
// checked them); item < num_seqs * num_kv_heads. Thread safety: items may
// run concurrently (scratch is thread_local).
void AttendItem(const SimdKernels& simd, const PagedAttentionParams& p, int64_t item);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CPU_CPU_ATTENTION_H_
