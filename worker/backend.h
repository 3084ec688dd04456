#ifndef PAGODA_WORKER_BACKEND_H_
#define PAGODA_WORKER_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/types/span.h"

namespace pagoda::worker {

// Memory owned by a backend (host memory on CPU, device memory on CUDA).
// Move-only through unique_ptr; never copied.
class Buffer {
 public:
  virtual ~Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  virtual float* data() = 0;
  virtual const float* data() const = 0;
  virtual size_t size() const = 0;  // In floats.

 protected:
  Buffer() = default;
};

// One copy of a KV block from `src` to `dst` (block ids in their caches).
struct BlockPair {
  int32_t src = 0;
  int32_t dst = 0;
};

// Inputs of PagedAttention. Query, output and caches are backend memory;
// the per-sequence metadata is host memory (a device backend uploads it).
// Token rows of sequence s are [query_start[s], query_start[s+1]); those
// queries are the last (query_start[s+1] - query_start[s]) positions of a
// context of context_lens[s] tokens, whose K/V are already in the cache
// (including this step's tokens). Attention is causal within the context.
struct PagedAttentionParams {
  const float* query = nullptr;        // [num_tokens, num_heads, head_dim]
  float* output = nullptr;             // [num_tokens, num_heads, head_dim]
  const float* key_cache = nullptr;    // [num_blocks, num_kv_heads, block_size, head_dim]
  const float* value_cache = nullptr;  // same layout as key_cache
  int num_heads = 0;
  int num_kv_heads = 0;  // Divides num_heads (GQA); query head h reads kv head
                         // h / (num_heads / num_kv_heads).
  int head_dim = 0;
  int block_size = 0;
  float scale = 1.0f;                      // Usually 1 / sqrt(head_dim).
  absl::Span<const int32_t> query_start;   // num_seqs + 1 entries, ascending.
  absl::Span<const int32_t> context_lens;  // num_seqs entries.
  // num_seqs rows of max_blocks_per_seq physical block ids, row-major; only
  // the first ceil(context_lens[s] / block_size) entries of a row are read.
  absl::Span<const int32_t> block_tables;
  int max_blocks_per_seq = 0;
};

// The operations the Llama model is written against. Pointers are backend
// memory; sizes are in elements. Every operation is synchronous from the
// caller's view (a device backend may queue work on one stream, in order).
// Preconditions are the caller's to meet (the batch builder validates the
// step plan); backends do not re-check them. Thread safety: one caller at a
// time.
class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::unique_ptr<Buffer> Allocate(size_t num_floats) = 0;
  // Host <-> backend copies of n floats.
  virtual void Upload(const float* host, float* device, size_t n) = 0;
  virtual void Download(const float* device, float* host, size_t n) = 0;

  // out[t, :] = table[token_ids[t], :], hidden floats per row.
  virtual void Embedding(absl::Span<const int32_t> token_ids, const float* table, int hidden,
                         float* out) = 0;
  // out[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * weight.
  virtual void RmsNorm(const float* x, const float* weight, int rows, int dim, float eps,
                       float* out) = 0;
  // residual += x, then out = RmsNorm(residual). The pre-norm residual stream
  // of a decoder layer in one pass.
  virtual void AddRmsNorm(float* residual, const float* x, const float* weight, int rows, int dim,
                          float eps, float* out) = 0;
  // y[rows, out_dim] = x[rows, in_dim] @ weight[out_dim, in_dim]^T (+ bias[out_dim]).
  // bias may be null.
  virtual void Linear(const float* x, int rows, int in_dim, const float* weight, const float* bias,
                      int out_dim, float* y) = 0;
  // Rotary embedding, Hugging Face rotate-half convention, in place on
  // q [num_tokens, num_q_heads, head_dim] and k [num_tokens, num_kv_heads,
  // head_dim]. inv_freq has head_dim / 2 entries (scaling already applied).
  virtual void Rope(float* q, float* k, absl::Span<const int32_t> positions, int num_q_heads,
                    int num_kv_heads, int head_dim, const float* inv_freq) = 0;
  // Writes k, v [num_tokens, num_kv_heads, head_dim] into the caches at
  // slot_mapping[t] (block = slot / block_size, offset = slot % block_size).
  virtual void WriteKvCache(const float* k, const float* v, absl::Span<const int32_t> slot_mapping,
                            int num_kv_heads, int head_dim, int block_size, float* key_cache,
                            float* value_cache) = 0;
  virtual void PagedAttention(const PagedAttentionParams& params) = 0;
  // out[r, :] = silu(gate_up[r, :dim]) * gate_up[r, dim:2*dim].
  virtual void SiluAndMul(const float* gate_up, int rows, int dim, float* out) = 0;
  // out[i, :] = src[rows[i], :], dim floats per row.
  virtual void GatherRows(const float* src, absl::Span<const int32_t> rows, int dim,
                          float* out) = 0;
  // Copies whole blocks of block_floats floats within one cache, in order.
  virtual void CopyBlocks(float* cache, size_t block_floats, absl::Span<const BlockPair> pairs) = 0;
  // Copies whole blocks between backend memory and host swap space, in order.
  // to_host: src is `device`, dst is `host`; otherwise the reverse.
  virtual void SwapBlocks(float* device, float* host, size_t block_floats,
                          absl::Span<const BlockPair> pairs, bool to_host) = 0;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_BACKEND_H_
