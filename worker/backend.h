#ifndef PAGODA_WORKER_BACKEND_H_
#define PAGODA_WORKER_BACKEND_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/types/span.h"
#include "common/dtype.h"
#include "kernels/ops/block_copy_plan.h"

namespace pagoda::worker {

// Typed memory owned by a backend (host memory on CPU, device memory on
// CUDA): `size()` elements of `dtype()`. Move-only through unique_ptr.
class Buffer {
 public:
  virtual ~Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  virtual void* raw() = 0;
  virtual const void* raw() const = 0;
  DType dtype() const { return dtype_; }
  size_t size() const { return size_; }  // In elements.
  size_t nbytes() const { return size_ * DTypeSize(dtype_); }

  // The f32 view. REQUIRES: dtype() == DType::kF32 (checked).
  float* data();
  const float* data() const;

 protected:
  Buffer(DType dtype, size_t size) : dtype_(dtype), size_(size) {}

 private:
  DType dtype_;
  size_t size_;
};

// A non-owning typed view of backend memory: a row-major tensor of up to four
// dimensions. Weights are passed to the ops as Tensors, so a backend reads
// them in their stored dtype (f32, f16 or bf16) and accumulates in f32.
struct Tensor {
  DType dtype = DType::kF32;
  std::array<int64_t, 4> shape = {0, 0, 0, 0};
  int rank = 0;
  const void* data = nullptr;

  static Tensor Of(const Buffer& buffer, std::initializer_list<int64_t> dims);
  int64_t dim(int i) const { return shape[i]; }
  int64_t num_elements() const;
};

// One copy of a KV block from `src` to `dst` (block ids in their caches):
// the kernels' type, so a CUDA backend hands the pairs on unchanged.
using BlockPair = ::pagoda::kernels::BlockPair;

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

// Rotary tables built once at load: for positions [0, max_positions),
// cos_sin[p * head_dim + i] = cos(p * inv_freq[i]) and
// cos_sin[p * head_dim + head_dim / 2 + i] = sin(p * inv_freq[i]), i < head_dim / 2,
// computed in double. Positions past the table are computed from inv_freq.
struct RopeTable {
  const float* cos_sin = nullptr;   // [max_positions, head_dim], backend memory.
  const float* inv_freq = nullptr;  // [head_dim / 2], scaling applied; backend memory.
  int max_positions = 0;
};

// The operations the Llama model is written against. Pointers are backend
// memory; sizes are in elements. Activations are f32; weights are Tensors in
// their stored dtype. Every operation is synchronous from the caller's view
// (a device backend may queue work on one stream, in order). Preconditions
// are the caller's to meet (the batch builder validates the step plan);
// backends do not re-check them. Thread safety: one caller at a time.
class Backend {
 public:
  virtual ~Backend() = default;

  // Uninitialised memory of `num_elements` elements of `dtype`.
  virtual std::unique_ptr<Buffer> Allocate(DType dtype, size_t num_elements) = 0;
  std::unique_ptr<Buffer> Allocate(size_t num_floats) { return Allocate(DType::kF32, num_floats); }
  // Buffers allocated so far. The model allocates its workspace once at load,
  // so this does not move during a forward pass (tests hold it to that).
  virtual uint64_t num_allocations() const = 0;
  // Host <-> backend copies of n bytes.
  virtual void UploadBytes(const void* host, void* device, size_t n) = 0;
  virtual void DownloadBytes(const void* device, void* host, size_t n) = 0;
  void Upload(const float* host, float* device, size_t n) {
    UploadBytes(host, device, n * sizeof(float));
  }
  void Download(const float* device, float* host, size_t n) {
    DownloadBytes(device, host, n * sizeof(float));
  }

  // out[t, :] = table[token_ids[t], :] widened to f32; table is [vocab, hidden].
  virtual void Embedding(absl::Span<const int32_t> token_ids, const Tensor& table, float* out) = 0;
  // out[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * weight; weight is [dim].
  virtual void RmsNorm(const float* x, const Tensor& weight, int rows, float eps, float* out) = 0;
  // residual += x, then out = RmsNorm(residual). The pre-norm residual stream
  // of a decoder layer in one pass.
  virtual void AddRmsNorm(float* residual, const float* x, const Tensor& weight, int rows,
                          float eps, float* out) = 0;
  // y[rows, out_dim] = x[rows, in_dim] @ weight^T (+ bias), weight is
  // [out_dim, in_dim] and bias (null or f32 [out_dim]); products accumulate in f32.
  virtual void Linear(const float* x, int rows, const Tensor& weight, const float* bias,
                      float* y) = 0;
  // Rotary embedding, Hugging Face rotate-half convention, in place on
  // q [num_tokens, num_q_heads, head_dim] and k [num_tokens, num_kv_heads, head_dim].
  virtual void Rope(float* q, float* k, absl::Span<const int32_t> positions, int num_q_heads,
                    int num_kv_heads, int head_dim, const RopeTable& table) = 0;
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

// A bump allocator over one backend buffer, sized once so that the forward
// pass allocates nothing: Take hands out 64-byte-aligned f32 regions until
// Reset. Thread safety: one caller at a time.
class Workspace {
 public:
  // The backend must outlive the workspace.
  explicit Workspace(Backend* backend) : backend_(backend) {}
  // Makes room for `floats` floats (plus alignment slack for `regions`
  // regions). Allocates only when the current buffer is too small.
  void Reserve(size_t floats, int regions);
  size_t capacity() const { return buffer_ ? buffer_->size() : 0; }
  // REQUIRES: the regions taken since Reset fit the reservation.
  float* Take(size_t floats);
  void Reset() { used_ = 0; }

 private:
  static constexpr size_t kAlignFloats = 16;  // 64 bytes.
  Backend* backend_;
  std::unique_ptr<Buffer> buffer_;
  size_t used_ = 0;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_BACKEND_H_
