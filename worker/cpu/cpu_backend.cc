#include "worker/cpu/cpu_backend.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "worker/cpu/cpu_attention.h"
#include "worker/cpu/host_memory.h"
#include "worker/cpu/panel_linear.h"
#include "worker/cpu/quant_linear.h"
#include "worker/cpu/simd.h"
#include "worker/cpu/thread_pool.h"
#include "worker/cpu/w8a8_linear.h"
#include "worker/sampler.h"

namespace pagoda::worker {
namespace {

// Linear's cache blocking: a block of this many token rows (128 KB of
// 512-wide f32 activations) is dotted with a block of this many groups of
// four weight rows (64 rows: 128 KB of 512-wide f32 weights), so both stay in
// L2 while the other streams through, and each group's four rows stay in L1
// across the token block.
constexpr int kTokenRowBlock = 64;
// Elements of a weight row one tile call covers: four 2 KB f32 weight-row
// slices and four token-row slices fill a third of a 48 KB L1.
constexpr int64_t kSliceElements = 512;
constexpr int64_t kWeightQuadBlock = 16;
// From this many token rows on, Linear packs weight panels for the blocked
// product (panel_linear.h). Measured on one thread (Zen 3, thread CPU time):
// at 8 rows both paths ran 47-50 GFLOP/s; at 16 the panels 54-72 against
// the tiles' 38-53, and from 64 rows 76-89 against 38-57.
constexpr int kPanelMinRows = 16;

// Host memory from host_memory.h (weights on huge pages, carved one after
// another from slabs). Not value-initialised: KV caches can be gigabytes and
// are always written before they are read.
class HostBuffer final : public Buffer {
 public:
  HostBuffer(DType dtype, size_t n)
      : Buffer(dtype, n), bytes_(std::max<size_t>(1, n) * DTypeSize(dtype)) {
    data_ = static_cast<char*>(AllocateHost(bytes_));
  }
  ~HostBuffer() override { FreeHost(data_, bytes_); }
  void* raw() override { return data_; }
  const void* raw() const override { return data_; }

 private:
  size_t bytes_;
  char* data_ = nullptr;
};

const char* RowAt(const Tensor& t, int64_t row) {
  return static_cast<const char*>(t.data) + row * t.dim(t.rank - 1) * DTypeSize(t.dtype);
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(int num_threads, WeightOnlyActivations weight_only)
      : pool_(num_threads > 0 ? num_threads : AvailableCpuCount()),
        simd_(BestSimdKernels()),
        weight_only_(weight_only) {}

  void HostParallelFor(int64_t n, int64_t grain,
                       const std::function<void(int64_t, int64_t)>& fn) override {
    pool_.ParallelFor(n, grain, fn);
  }

  DType activation_dtype() const override { return DType::kF32; }
  DType default_kv_cache_dtype() const override { return DType::kF32; }
  bool computes_rope_past_table() const override { return true; }

  std::unique_ptr<Buffer> Allocate(DType dtype, size_t num_elements) override {
    allocations_.fetch_add(1, std::memory_order_relaxed);
    return std::make_unique<HostBuffer>(dtype, num_elements);
  }
  // Backend memory is host memory already.
  std::unique_ptr<Buffer> AllocateHost(DType dtype, size_t num_elements) override {
    return Allocate(dtype, num_elements);
  }
  uint64_t num_allocations() const override { return allocations_.load(); }
  // A weight is uploaded once, whole, after its pages faulted in: those that
  // got 4 KiB pages are collapsed into huge ones now. Step metadata uploads
  // are smaller than kSmallBytes and skip the system call.
  void UploadBytes(const void* host, void* device, size_t n) override {
    std::memcpy(device, host, n);
    if (n >= kSmallBytes) CollapseToHugePages(device, n);
  }
  void DownloadBytes(const void* device, void* host, size_t n) override {
    std::memcpy(host, device, n);
  }
  void CopyRows(const void* src, size_t src_stride, void* dst, size_t dst_stride, size_t row_bytes,
                int rows) override {
    for (int r = 0; r < rows; ++r) {
      std::memcpy(static_cast<char*>(dst) + r * dst_stride,
                  static_cast<const char*>(src) + r * src_stride, row_bytes);
    }
  }

  void Embedding(const StepBatch& batch, const Tensor& table, void* out_raw) override {
    float* out = static_cast<float*>(out_raw);
    const int64_t hidden = table.dim(1);
    for (int t = 0; t < batch.num_tokens; ++t) {
      ConvertToFloat(table.dtype, RowAt(table, batch.token_ids[t]), hidden, out + t * hidden);
    }
  }

  void RmsNorm(const void* x_raw, const Tensor& weight, int rows, float eps,
               void* out_raw) override {
    const float* x = static_cast<const float*>(x_raw);
    float* out = static_cast<float*>(out_raw);
    const int dim = static_cast<int>(weight.dim(0));
    pool_.ParallelFor(rows, RowsPerTask(dim), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) NormRow(x + r * dim, weight, dim, eps, out + r * dim);
    });
  }

  void AddRmsNorm(void* residual_raw, const void* x_raw, const Tensor& weight, int rows, float eps,
                  void* out_raw) override {
    float* residual = static_cast<float*>(residual_raw);
    const float* x = static_cast<const float*>(x_raw);
    float* out = static_cast<float*>(out_raw);
    const int dim = static_cast<int>(weight.dim(0));
    pool_.ParallelFor(rows, RowsPerTask(dim), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        float* row = residual + r * dim;
        const float* add = x + r * dim;
        for (int i = 0; i < dim; ++i) row[i] += add[i];
        NormRow(row, weight, dim, eps, out + r * dim);
      }
    });
  }

  // Activations and logits are both f32 here, so y_dtype is always f32.
  void Linear(const void* x_raw, int rows, const Tensor& weight, const float* bias, void* y_raw,
              DType /*y_dtype*/) override {
    const float* x = static_cast<const float*>(x_raw);
    float* y = static_cast<float*>(y_raw);
    if (rows <= 0) return;
    if (rows >= kPanelMinRows && simd_.gemm6x16 != nullptr &&
        weight.dim(1) < simd_.panel_linear_below_in_features) {
      PanelLinear(pool_, simd_, x, rows, weight, bias, y);
      return;
    }
    TiledLinear(x, rows, weight, bias, y);
  }

  absl::StatusOr<std::unique_ptr<worker::Linear>> CreateQuantizedLinear(
      QuantizedWeight weight) override {
    if (weight.code_type == CodeType::kFloat8E4M3 || weight.input_quant != InputQuant::kNone) {
      return CreateCpuW8A8Linear(weight, &pool_, BestSimdLevel());
    }
    return CreateCpuQuantLinear(weight, &pool_, BestSimdLevel(), weight_only_);
  }

  void Rope(void* q_raw, void* k_raw, int64_t token_stride, const StepBatch& batch, int num_q_heads,
            int num_kv_heads, int head_dim, const RopeTable& table) override {
    float* q = static_cast<float*>(q_raw);
    float* k = static_cast<float*>(k_raw);
    const int64_t* positions = batch.positions;
    const int half = head_dim / 2;
    const int64_t tokens = batch.num_tokens;
    pool_.ParallelFor(tokens, 16, [&](int64_t begin, int64_t end) {
      std::vector<float> computed;  // Only for positions past the table.
      for (int64_t t = begin; t < end; ++t) {
        const float* cos_sin;
        if (positions[t] < table.max_positions) {
          cos_sin = table.cos_sin + static_cast<size_t>(positions[t]) * head_dim;
        } else {
          computed.resize(head_dim);
          for (int i = 0; i < half; ++i) {
            const double angle = static_cast<double>(positions[t]) * table.inv_freq[i];
            computed[i] = static_cast<float>(std::cos(angle));
            computed[half + i] = static_cast<float>(std::sin(angle));
          }
          cos_sin = computed.data();
        }
        for (int h = 0; h < num_q_heads; ++h) {
          Rotate(q + t * token_stride + h * head_dim, cos_sin, half);
        }
        for (int h = 0; h < num_kv_heads; ++h) {
          Rotate(k + t * token_stride + h * head_dim, cos_sin, half);
        }
      }
    });
  }

  void WriteKvCache(const void* k_raw, const void* v_raw, int64_t token_stride,
                    const StepBatch& batch, const KvCacheLayer& cache) override {
    const float* k = static_cast<const float*>(k_raw);
    const float* v = static_cast<const float*>(v_raw);
    const int heads = cache.num_kv_heads;
    const int head_dim = cache.head_dim;
    const size_t width = DTypeSize(cache.dtype);
    const size_t block_elements = static_cast<size_t>(heads) * cache.block_size * head_dim;
    const SimdKernels::NarrowFn narrow = simd_.narrow(cache.dtype);
    char* key_cache = static_cast<char*>(cache.key);
    char* value_cache = static_cast<char*>(cache.value);
    // An FP8 cache's rows are x / scale (divided, as vLLM's cache ops do).
    std::vector<float> scaled(cache.k_scale == 1.0f && cache.v_scale == 1.0f ? 0 : head_dim);
    auto write_row = [&](const float* row, float scale, char* out) {
      if (scale == 1.0f) return narrow(row, out, head_dim);
      for (int i = 0; i < head_dim; ++i) scaled[i] = row[i] / scale;
      narrow(scaled.data(), out, head_dim);
    };
    for (int t = 0; t < batch.num_tokens; ++t) {
      const int64_t block = batch.slot_mapping[t] / cache.block_size;
      const int64_t offset = batch.slot_mapping[t] % cache.block_size;
      for (int h = 0; h < heads; ++h) {
        const size_t src =
            static_cast<size_t>(t) * token_stride + static_cast<size_t>(h) * head_dim;
        const size_t dst = block * block_elements +
                           (static_cast<size_t>(h) * cache.block_size + offset) * head_dim;
        write_row(k + src, cache.k_scale, key_cache + dst * width);
        write_row(v + src, cache.v_scale, value_cache + dst * width);
      }
    }
  }

  void PagedAttention(const PagedAttentionParams& p) override {
    const int num_seqs = p.batch->num_seqs;
    // One work item per (sequence, kv head): its K/V rows are read once for
    // all query heads of the group, and no two items write the same output.
    pool_.ParallelFor(static_cast<int64_t>(num_seqs) * p.cache.num_kv_heads, 1,
                      [&](int64_t begin, int64_t end) {
                        for (int64_t item = begin; item < end; ++item) AttendItem(simd_, p, item);
                      });
  }

  void SiluAndMul(const void* gate_up_raw, int rows, int dim, void* out_raw) override {
    const float* gate_up = static_cast<const float*>(gate_up_raw);
    float* out = static_cast<float*>(out_raw);
    pool_.ParallelFor(rows, RowsPerTask(dim), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* gate = gate_up + r * 2 * dim;
        const float* up = gate + dim;
        float* dst = out + r * dim;
        simd_.silu_mul(gate, up, dst, dim);
      }
    });
  }

  void GatherRows(const void* src_raw, const StepBatch& batch, int dim, void* out_raw) override {
    const float* src = static_cast<const float*>(src_raw);
    float* out = static_cast<float*>(out_raw);
    for (int i = 0; i < batch.num_logits_rows; ++i) {
      std::memcpy(out + static_cast<size_t>(i) * dim,
                  src + static_cast<size_t>(batch.logits_indices[i]) * dim, dim * sizeof(float));
    }
  }

  void Sample(const Tensor& logits, const SamplingBatch& params, SampleResults* out) override {
    const int rows = params.num_rows;
    const int64_t vocab = logits.dim(1);
    const int columns = params.num_logprobs;
    out->token_ids.resize(rows);
    out->logprobs.resize(rows);
    out->num_logprobs = columns;
    out->top_ids.resize(static_cast<size_t>(rows) * columns);
    out->top_logprobs.resize(static_cast<size_t>(rows) * columns);
    // Rows are processed in place (the contract allows it): the edits cost
    // their tokens, not a copy of the row.
    float* data = static_cast<float*>(const_cast<void*>(logits.data));
    pool_.ParallelFor(rows, 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const size_t top = static_cast<size_t>(r) * columns;
        SampleRowInPlace(
            absl::MakeSpan(data + r * vocab, vocab), RowParams(params, r, columns, vocab),
            RowSampleOutput{
                .token_id = &out->token_ids[r],
                .logprob = &out->logprobs[r],
                .top_ids = absl::MakeSpan(out->top_ids.data() + top, columns),
                .top_logprobs = absl::MakeSpan(out->top_logprobs.data() + top, columns)});
      }
    });
  }

  static RowSamplingParams RowParams(const SamplingBatch& params, int64_t r, int columns,
                                     int64_t vocab) {
    RowSamplingParams row;
    row.temperature = params.temperatures[r];
    row.top_k = params.top_k[r];
    row.top_p = params.top_p[r];
    row.seed = params.seeds[r];
    row.sample_index = params.sample_indices[r];
    row.num_logprobs = columns;
    if (params.min_p != nullptr) row.min_p = params.min_p[r];
    if (params.has_edits) {
      row.penalties = params.penalties[r];
      row.edits = absl::MakeConstSpan(params.edits + params.edit_offsets[r],
                                      params.edits + params.edit_offsets[r + 1]);
      row.processed_logprobs =
          params.processed_logprobs != nullptr && params.processed_logprobs[r] != 0;
    }
    if (params.mask_offsets != nullptr && params.mask_offsets[r] >= 0) {
      row.token_mask = absl::MakeConstSpan(params.token_masks + params.mask_offsets[r],
                                           (static_cast<size_t>(vocab) + 31) / 32);
    }
    return row;
  }

  void CopyBlocks(absl::Span<void* const> caches, size_t block_bytes,
                  absl::Span<const BlockPair> pairs) override {
    for (void* cache : caches) {
      char* base = static_cast<char*>(cache);
      for (const BlockPair& pair : pairs) {
        std::memcpy(base + pair.dst * block_bytes, base + pair.src * block_bytes, block_bytes);
      }
    }
  }

  void SwapBlocks(absl::Span<void* const> device_caches, absl::Span<void* const> host_caches,
                  size_t block_bytes, absl::Span<const BlockPair> pairs,
                  SwapDirection direction) override {
    const bool to_host = direction == SwapDirection::kToHost;
    for (size_t i = 0; i < device_caches.size(); ++i) {
      const char* src = static_cast<const char*>(to_host ? device_caches[i] : host_caches[i]);
      char* dst = static_cast<char*>(to_host ? host_caches[i] : device_caches[i]);
      for (const BlockPair& pair : pairs) {
        std::memcpy(dst + pair.dst * block_bytes, src + pair.src * block_bytes, block_bytes);
      }
    }
  }

 private:
  // Enough rows per task that a task is worth handing to another thread.
  static int64_t RowsPerTask(int dim) { return std::max<int64_t>(1, 8192 / std::max(1, dim)); }

  void NormRow(const float* row, const Tensor& weight, int dim, float eps, float* out) const {
    const float sum_squares = simd_.dot_f32(row, row, dim);
    const float scale = 1.0f / std::sqrt(sum_squares / dim + eps);
    if (weight.dtype == DType::kF32) {
      const float* w = static_cast<const float*>(weight.data);
      for (int i = 0; i < dim; ++i) out[i] = row[i] * scale * w[i];
    } else {
      ConvertToFloat(weight.dtype, weight.data, dim, out);
      for (int i = 0; i < dim; ++i) out[i] *= row[i] * scale;
    }
  }

  static void Rotate(float* head, const float* cos_sin, int half) {
    const float* cos = cos_sin;
    const float* sin = cos_sin + half;
    for (int i = 0; i < half; ++i) {
      const float x1 = head[i];
      const float x2 = head[i + half];
      head[i] = x1 * cos[i] - x2 * sin[i];
      head[i + half] = x2 * cos[i] + x1 * sin[i];
    }
  }

  // Threads split the output features in groups of four, read in place (no
  // packing: a decode step reads each weight from memory once, and the
  // weight's dtype is widened in registers).
  void TiledLinear(const float* x, int rows, const Tensor& weight, const float* bias, float* y) {
    const int64_t out_dim = weight.dim(0);
    const int64_t in_dim = weight.dim(1);
    const int64_t quads = (out_dim + 3) / 4;
    // At least about 32 KB of weight rows per task.
    const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(1, in_dim));
    pool_.ParallelFor(quads, grain, [&](int64_t begin, int64_t end) {
      for (int64_t first_quad = begin; first_quad < end; first_quad += kWeightQuadBlock) {
        const int64_t last_quad = std::min(end, first_quad + kWeightQuadBlock);
        for (int first_row = 0; first_row < rows; first_row += kTokenRowBlock) {
          const int block_rows = std::min(kTokenRowBlock, rows - first_row);
          LinearQuads(x + static_cast<size_t>(first_row) * in_dim, block_rows, weight, bias,
                      first_quad, last_quad, y + static_cast<size_t>(first_row) * out_dim);
        }
      }
    });
  }

  // Output features [4 * begin, 4 * end) of `rows` token rows.
  void LinearQuads(const float* x, int rows, const Tensor& weight, const float* bias, int64_t begin,
                   int64_t end, float* y) const {
    const int64_t out_dim = weight.dim(0);
    const int64_t in_dim = weight.dim(1);
    const SimdKernels::Tile4Fn tile4 = simd_.tile4(weight.dtype);
    const SimdKernels::DotFn dot = simd_.dot(weight.dtype);
    for (int64_t q = begin; q < end; ++q) {
      const int64_t j = 4 * q;
      if (j + 4 <= out_dim) {
        // Wide rows in slices, so that a slice of the four weight rows and
        // of a tile's token rows fit L1 together (one tile of tokens reads
        // the weight rows once: no slicing, and each row's sums are added in
        // the order of a one-row step's).
        const size_t width = DTypeSize(weight.dtype);
        // More rows than one tile takes (prefill) go four at a time.
        const bool one_tile = rows <= simd_.tile4_max_rows;
        const int64_t slice = one_tile ? in_dim : kSliceElements;
        for (int64_t k = 0; k < in_dim; k += slice) {
          const int64_t n = std::min(slice, in_dim - k);
          const char* w = RowAt(weight, j) + k * width;
          for (int r = 0, tile_rows = 0; r < rows; r += tile_rows) {
            tile_rows = one_tile ? rows : std::min(4, rows - r);
            float* out = y + r * out_dim + j;
            if (k == 0) {
              tile4(w, in_dim, x + r * in_dim + k, in_dim, n, tile_rows, out, out_dim);
              continue;
            }
            float partial[16];
            tile4(w, in_dim, x + r * in_dim + k, in_dim, n, tile_rows, partial, 4);
            for (int t = 0; t < tile_rows; ++t) {
              for (int c = 0; c < 4; ++c) out[t * out_dim + c] += partial[t * 4 + c];
            }
          }
        }
      } else {
        for (int64_t c = j; c < out_dim; ++c) {
          for (int r = 0; r < rows; ++r)
            y[r * out_dim + c] = dot(RowAt(weight, c), x + r * in_dim, in_dim);
        }
      }
      if (bias != nullptr) {
        for (int r = 0; r < rows; ++r) {
          for (int64_t c = j; c < std::min(j + 4, out_dim); ++c) y[r * out_dim + c] += bias[c];
        }
      }
    }
  }

  ThreadPool pool_;
  const SimdKernels& simd_;
  WeightOnlyActivations weight_only_;
  std::atomic<uint64_t> allocations_{0};
};

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend(int num_threads, WeightOnlyActivations weight_only) {
  return std::make_unique<CpuBackend>(num_threads, weight_only);
}

}  // namespace pagoda::worker
