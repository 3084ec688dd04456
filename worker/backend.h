#ifndef PAGODA_WORKER_BACKEND_H_
#define PAGODA_WORKER_BACKEND_H_

// The device-neutral interface the Llama model is written against, once, for
// the CPU backend (worker/cpu/) and the CUDA backend (worker/cuda/).
//
// Memory: every pointer an op takes is backend memory (host memory on CPU,
// device memory on CUDA) unless its comment says host. Element types:
// - weights are Tensors in their stored dtype (f32, f16 or bf16);
// - activations (hidden states, q/k/v, attention output, MLP intermediates)
//   are untyped pointers of the backend's activation_dtype(): f32 on CPU, the
//   serving dtype (bf16 or f16) on CUDA. Products and reductions accumulate
//   in f32 whatever the storage type;
// - KV caches are untyped pointers of the cache dtype (KvCacheLayer::dtype),
//   chosen by --kv-cache-dtype and independent of the activation dtype;
// - logits are always f32 (the lm_head Linear writes f32), and stay in
//   backend memory: Sample reads them there and returns only the tokens.
//
// Per-step metadata (token ids, positions, slots, block tables...) is uploaded
// once per step into a StepBatch (worker/step_batch_upload.h) and every op that needs
// it takes the StepBatch, so a device backend never copies metadata per op.
//
// Ordering: every operation is synchronous from the caller's view (a device
// backend may queue work on one stream, in order; DownloadBytes and Sample
// return only after the results are on the host). Preconditions are the
// caller's to meet (FlattenStepPlan validates the step plan); backends do not
// re-check them. Thread safety: one caller at a time per backend.

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/dtype.h"
#include "common/logits_processing.h"
#include "kernels/ops/block_copy_plan.h"

namespace pagoda::worker {

class Linear;            // worker/linear.h
struct QuantizedWeight;  // worker/quant/quantized_weight.h

// Typed memory owned by a backend (host memory on CPU, device memory on
// CUDA; or host memory from AllocateHost): `size()` elements of `dtype()`.
// Move-only through unique_ptr.
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
// them in their stored dtype (f32, f16 or bf16) and accumulates in f32; the
// logits come back as one.
struct Tensor {
  DType dtype = DType::kF32;
  std::array<int64_t, 4> shape = {0, 0, 0, 0};
  int rank = 0;
  const void* data = nullptr;

  static Tensor Of(const Buffer& buffer, std::initializer_list<int64_t> dims);
  // Rows [first, first + count) of a rank-2 tensor: the same memory, offset.
  Tensor Rows(int64_t first, int64_t count) const;
  int64_t dim(int i) const { return shape[i]; }
  int64_t num_elements() const;
};

// One copy of a KV block from `src` to `dst` (block ids in their caches):
// the kernels' type (two int64, so a span of them is the [num_pairs, 2]
// int64 array kernels/ops/cache_ops.h's CopyBlocksParams reads).
using BlockPair = ::pagoda::kernels::BlockPair;

// Per-row sampling parameters of one step, one entry per logits row, in
// backend memory (uploaded with the StepBatch). Field for field the arrays of
// kernels/ops/sampling.h's TokenSamplingParams, so a CUDA backend passes them
// to LaunchTokenSampling as they are.
struct SamplingBatch {
  int num_rows = 0;
  const float* temperatures = nullptr;       // < 1e-5: greedy.
  const int32_t* top_k = nullptr;            // <= 0 or >= vocab: off.
  const float* top_p = nullptr;              // <= 0 or >= 1: off.
  const uint64_t* seeds = nullptr;           // Read by non-greedy rows only.
  const uint64_t* sample_indices = nullptr;  // Which draw of its sequence.
  // Logits processing (common/logits_processing.h), per row: min_p (0 =
  // off), penalties, and the row's edits [edit_offsets[r],
  // edit_offsets[r + 1]) of `edits`, sorted by token id.
  const float* min_p = nullptr;
  const LogitPenalties* penalties = nullptr;
  const int32_t* edit_offsets = nullptr;  // [num_rows + 1]
  const LogitEdit* edits = nullptr;
  // Structured outputs, per row: the word offset of its token mask in
  // `token_masks` (TokenMaskAllows), -1 for none. Null when no row has one.
  const int32_t* mask_offsets = nullptr;  // [num_rows]
  const uint32_t* token_masks = nullptr;
  // Per row, non-zero when its logprobs are log_softmax of the processed
  // logits rather than the raw ones (beam search; without edits the two are
  // the same). Null when no row asks for them.
  const uint8_t* processed_logprobs = nullptr;  // [num_rows]
  // Host-known: some row has edits, allowed_only or a token mask (else the
  // rows' raw logits are sampled as they are, and edits may be null).
  bool has_edits = false;
  // Top logprobs computed for every row: the largest any row asked for, in
  // [0, kMaxTopLogprobs] (the runner keeps each row's own count).
  int num_logprobs = 0;
};

// One step's batch metadata in backend memory, built from a FlatBatch by one
// upload (worker/step_batch_upload.h), carved from the model's workspace and valid
// until that workspace is next Reset. Array types are the ones the CUDA
// kernels' params take, so a device backend fills them without copies:
// int32 for token ids, query starts, context lengths, block tables and
// logits indices (kernels/attention/paged_attention.h, embedding.h), int64
// for positions and slots (rotary_embedding.h, cache_ops.h).
struct StepBatch {
  // Backend memory.
  const int32_t* token_ids = nullptr;     // [num_tokens]
  const int64_t* positions = nullptr;     // [num_tokens]
  const int64_t* slot_mapping = nullptr;  // [num_tokens]; slot = block * block_size + offset
  const int32_t* query_start = nullptr;   // [num_seqs + 1], ascending, [0] = 0
  const int32_t* context_lens = nullptr;  // [num_seqs]
  // [num_seqs, max_blocks_per_seq] physical block ids, row-major; only the
  // first ceil(context_lens[s] / block_size) entries of a row are read.
  const int32_t* block_tables = nullptr;
  const int32_t* logits_indices = nullptr;  // [num_logits_rows] token rows to score
  SamplingBatch sampling;                   // num_rows == num_logits_rows

  // Host-known scalars (plan shapes: launch grids and plans use them).
  int num_tokens = 0;
  int num_seqs = 0;
  int num_logits_rows = 0;
  int max_query_len = 0;       // Most query tokens of one sequence.
  int max_context_len = 0;     // Longest context_lens entry.
  int max_blocks_per_seq = 0;  // Row stride of block_tables.
  bool decode_only = false;    // Every sequence has exactly one query token.
};

// One layer's K and V caches: [num_blocks, num_kv_heads, block_size,
// head_dim] each, elements of `dtype`, backend memory.
struct KvCacheLayer {
  void* key = nullptr;
  void* value = nullptr;
  DType dtype = DType::kF32;
  int num_kv_heads = 0;
  int block_size = 0;
  int head_dim = 0;
  // An FP8 cache holds FP8(k / k_scale) and FP8(v / v_scale) (E4M3 or
  // E5M2; the checkpoint's per-layer scales, worker/kv_cache_scales.h); 1
  // for every other dtype.
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};

// Inputs of PagedAttention. Query and output are activations
// [num_tokens, num_heads, head_dim], the query's token rows
// query_token_stride elements apart (the fused QKV product's rows), the
// output's contiguous. Token rows of sequence s are
// [query_start[s], query_start[s+1]); those queries are the last
// (query_start[s+1] - query_start[s]) positions of a context of
// context_lens[s] tokens, whose K/V are already in the cache (including this
// step's tokens). Attention is causal within the context; scores and the
// softmax are f32 whatever the cache dtype.
struct PagedAttentionParams {
  const void* query = nullptr;
  int64_t query_token_stride = 0;  // 0: num_heads * head_dim (contiguous).
  void* output = nullptr;
  KvCacheLayer cache;
  int num_heads = 0;   // num_kv_heads divides it (GQA): query head h reads
                       // kv head h / (num_heads / num_kv_heads).
  float scale = 1.0f;  // Usually 1 / sqrt(head_dim).
  const StepBatch* batch = nullptr;
};

// Rotary tables built once at load by kernels/ops/rope_cache.h
// (BuildRopeCosSinCache): for positions [0, max_positions),
// cos_sin[p * head_dim + i] = cos(p * inv_freq[i]) and
// cos_sin[p * head_dim + head_dim / 2 + i] = sin(p * inv_freq[i]),
// i < head_dim / 2, computed in double, f32 in backend memory. inv_freq has
// every scaling folded in (linear's position scale too), so positions past
// the table are computed from it (CPU; the CUDA kernel requires positions
// inside the table).
struct RopeTable {
  const float* cos_sin = nullptr;   // [max_positions, head_dim]
  const float* inv_freq = nullptr;  // [head_dim / 2]
  int max_positions = 0;
};

// What Sample returns, in host memory. Vectors are resized by Sample (reuse
// one SampleResults across steps and they stop allocating).
struct SampleResults {
  std::vector<int32_t> token_ids;   // [num_rows]
  std::vector<float> logprobs;      // [num_rows]: the sampled token's
  int num_logprobs = 0;             // Columns of the two below.
  std::vector<int32_t> top_ids;     // [num_rows, num_logprobs]
  std::vector<float> top_logprobs;  // [num_rows, num_logprobs]
};

// Which way SwapBlocks moves blocks.
enum class SwapDirection { kToHost, kToDevice };

class Backend {
 public:
  virtual ~Backend() = default;

  // The element type of activations: f32 on CPU, bf16 or f16 on CUDA.
  virtual DType activation_dtype() const = 0;
  // The KV cache dtype --kv-cache-dtype=auto means: f32 on CPU, the
  // activation dtype elsewhere.
  virtual DType default_kv_cache_dtype() const = 0;

  // Whether Rope computes positions past RopeTable::max_positions from
  // inv_freq (CPU) or requires them inside the table (CUDA).
  virtual bool computes_rope_past_table() const { return false; }

  // Uninitialised backend memory of `num_elements` elements of `dtype`.
  virtual std::unique_ptr<Buffer> Allocate(DType dtype, size_t num_elements) = 0;
  // The first device error since creation (OK if none); results of ops after
  // it are not to be trusted. Host backends report errors where they occur.
  // Whatever its code, the worker edge reports it as a fault (INTERNAL, see
  // worker/step_execution.h): the plan was valid, the device is not.
  virtual absl::Status status() const { return absl::OkStatus(); }
  // Uninitialised host memory the backend copies to and from fastest (pinned
  // on CUDA, plain on CPU): swap space and upload staging.
  virtual std::unique_ptr<Buffer> AllocateHost(DType dtype, size_t num_elements) = 0;
  // Buffers allocated so far (Allocate and AllocateHost). The model reserves
  // its workspace and staging at load, so this does not move during a
  // forward pass or sampling (tests hold it to that).
  virtual uint64_t num_allocations() const = 0;
  // Host <-> backend copies of n bytes.
  virtual void UploadBytes(const void* host, void* device, size_t n) = 0;
  virtual void DownloadBytes(const void* device, void* host, size_t n) = 0;

  // out[t, :] = table[token_ids[t], :] in the activation dtype; table is
  // [vocab, hidden].
  virtual void Embedding(const StepBatch& batch, const Tensor& table, void* out) = 0;
  // out[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * weight; weight is [dim].
  virtual void RmsNorm(const void* x, const Tensor& weight, int rows, float eps, void* out) = 0;
  // residual += x, then out = RmsNorm(residual). The pre-norm residual stream
  // of a decoder layer in one pass.
  virtual void AddRmsNorm(void* residual, const void* x, const Tensor& weight, int rows, float eps,
                          void* out) = 0;
  // y[rows, out_dim] = x[rows, in_dim] @ weight^T (+ bias): weight is
  // [out_dim, in_dim], bias null or f32 [out_dim], x activations, y of
  // y_dtype (the activation dtype, or f32 for the logits); products
  // accumulate in f32.
  virtual void Linear(const void* x, int rows, const Tensor& weight, const float* bias, void* y,
                      DType y_dtype) = 0;
  // A Linear over a weight-only quantized weight (worker/linear.h), built
  // once at load from the checkpoint's unpacked form. UNIMPLEMENTED naming
  // the module and its bits on a backend with no kernel for it (the
  // default).
  virtual absl::StatusOr<std::unique_ptr<worker::Linear>> CreateQuantizedLinear(
      QuantizedWeight weight);
  // Rotary embedding at batch.positions, Hugging Face rotate-half convention,
  // in place on q [num_tokens, num_q_heads, head_dim] and
  // k [num_tokens, num_kv_heads, head_dim], whose token rows are both
  // token_stride elements apart (rows of the fused QKV product).
  virtual void Rope(void* q, void* k, int64_t token_stride, const StepBatch& batch, int num_q_heads,
                    int num_kv_heads, int head_dim, const RopeTable& table) = 0;
  // Writes k, v [num_tokens, num_kv_heads, head_dim] (activations, token
  // rows token_stride elements apart) into the cache at batch.slot_mapping[t]
  // (block = slot / block_size, offset = slot % block_size), converted to the
  // cache dtype (round to nearest even; FP8: k / k_scale and v / v_scale,
  // saturated to +-448).
  virtual void WriteKvCache(const void* k, const void* v, int64_t token_stride,
                            const StepBatch& batch, const KvCacheLayer& cache) = 0;
  // Rope on q and k, then WriteKvCache of the rotated k and of v: one op so
  // that a backend may fuse them (the CUDA backend can, behind its decode
  // fusions option: kernels/ops/rope_cache_write.h). Afterwards k's rows in
  // the activations are unspecified (rotated or not): read K from the cache.
  virtual void RopeAndWriteKvCache(void* q, void* k, const void* v, int64_t token_stride,
                                   const StepBatch& batch, int num_q_heads, int head_dim,
                                   const RopeTable& table, const KvCacheLayer& cache) {
    Rope(q, k, token_stride, batch, num_q_heads, cache.num_kv_heads, head_dim, table);
    WriteKvCache(k, v, token_stride, batch, cache);
  }
  virtual void PagedAttention(const PagedAttentionParams& params) = 0;
  // Calls fn(begin, end) over disjoint ranges covering [0, n), each at
  // least `grain` long but the last, on the backend's host threads (the CPU
  // pool), returning when all are done: host-side work of a step (LoRA's
  // Apply) shares the cores the ops use. Inline on one thread by default.
  virtual void HostParallelFor(int64_t n, int64_t grain,
                               const std::function<void(int64_t, int64_t)>& fn) {
    (void)grain;
    if (n > 0) fn(0, n);
  }
  // out[r, :] = silu(gate_up[r, :dim]) * gate_up[r, dim:2*dim].
  virtual void SiluAndMul(const void* gate_up, int rows, int dim, void* out) = 0;
  // out[i, :] = src[batch.logits_indices[i], :] for i < num_logits_rows,
  // dim activations per row.
  virtual void GatherRows(const void* src, const StepBatch& batch, int dim, void* out) = 0;
  // Copies `rows` rows of `row_bytes` bytes, backend memory to backend
  // memory, in stream order: row r from src + r * src_stride to
  // dst + r * dst_stride (a block of columns of a row-major matrix: each
  // half of an EAGLE head's concatenated fc input). REQUIRES: both strides
  // >= row_bytes; src and dst do not overlap.
  virtual void CopyRows(const void* src, size_t src_stride, void* dst, size_t dst_stride,
                        size_t row_bytes, int rows) = 0;

  // Picks one token per row of `logits` ([num_rows, vocab] f32, backend
  // memory) under `params` and writes the results to host memory. The rule
  // is kernels/ops/sampling.h's, on every backend: greedy (argmax, lowest id
  // on ties) below temperature 1e-5; otherwise top-k (ties at the k-th logit
  // kept), then top-p over the temperature softmax (boundary ties kept), then
  // a Gumbel-max draw with Philox4x32-10 noise keyed by (seed, sample_index)
  // and counted by token id. So a seeded row gives the same token on CPU and
  // CUDA for the same logits (up to the last-ulp differences of the devices'
  // exp/log, which can only matter on near-ties). Logprobs are log_softmax of
  // the raw logits: the sampled token's and the num_logprobs largest
  // (descending, lowest id first on ties). NaN logits count as -inf.
  // Before any of that, rows with edits or penalties are processed
  // (common/logits_processing.h), and the rule reads the processed logits
  // (logprobs still the raw ones). `logits` is the step's scratch: a backend
  // may overwrite those rows with their processed logits.
  virtual void Sample(const Tensor& logits, const SamplingBatch& params, SampleResults* out) = 0;

  // Copies whole blocks within the device caches, for every cache of
  // `caches` in one call (copy-on-write). `caches` lists the K caches of
  // every layer, then the V caches of every layer (2 * num_layers entries,
  // so a CUDA backend passes the halves as CopyBlocksParams' key_caches and
  // value_caches); block_bytes is the bytes of one block of one cache.
  // REQUIRES: ids in range; no dst is a src or the dst of another pair (a
  // device backend runs the pairs in parallel).
  virtual void CopyBlocks(absl::Span<void* const> caches, size_t block_bytes,
                          absl::Span<const BlockPair> pairs) = 0;
  // Moves whole blocks between device caches and host swap space (from
  // AllocateHost), for every cache in one call: device_caches[i] pairs with
  // host_caches[i], both in CopyBlocks' order. kToHost: src ids are device
  // blocks, dst ids host blocks; kToDevice the reverse. REQUIRES: ids in
  // range; no dst repeats.
  virtual void SwapBlocks(absl::Span<void* const> device_caches,
                          absl::Span<void* const> host_caches, size_t block_bytes,
                          absl::Span<const BlockPair> pairs, SwapDirection direction) = 0;
};

// A bump allocator over one backend buffer, sized once so that the forward
// pass allocates nothing: Take hands out 64-byte-aligned regions of bytes
// until Reset. Thread safety: one caller at a time.
class Workspace {
 public:
  static constexpr size_t kAlignment = 64;  // Cache lines, AVX-512 and 16-byte vector loads.

  // The backend must outlive the workspace.
  explicit Workspace(Backend* backend) : backend_(backend) {}
  // Makes room for `bytes` bytes in `regions` regions (alignment slack
  // included). Allocates only when the current buffer is too small; a new
  // buffer invalidates every region taken before.
  void Reserve(size_t bytes, int regions);
  size_t capacity() const { return buffer_ ? buffer_->nbytes() : 0; }  // In bytes.
  // A region of `bytes` bytes. REQUIRES: the regions taken since Reset fit
  // the reservation (checked: aborts).
  void* Take(size_t bytes);
  // A region of `count` elements of `dtype`.
  void* Take(DType dtype, size_t count) { return Take(count * DTypeSize(dtype)); }
  template <typename T>
  T* TakeArray(size_t count) {
    return static_cast<T*>(Take(count * sizeof(T)));
  }
  void Reset() { used_ = 0; }

 private:
  Backend* backend_;
  std::unique_ptr<Buffer> buffer_;
  size_t used_ = 0;  // Bytes.
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_BACKEND_H_
