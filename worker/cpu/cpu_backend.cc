#include "worker/cpu/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

namespace pagoda::worker {
namespace {

class HostBuffer final : public Buffer {
 public:
  // Not value-initialised: KV caches can be gigabytes and are always written
  // before they are read.
  explicit HostBuffer(size_t n) : data_(new float[n]), size_(n) {}
  float* data() override { return data_.get(); }
  const float* data() const override { return data_.get(); }
  size_t size() const override { return size_; }

 private:
  std::unique_ptr<float[]> data_;
  size_t size_;
};

// Runs fn(i) for i in [0, n) on up to hardware_concurrency threads. Work is
// split in contiguous chunks; below `min_parallel` items it runs inline.
void ParallelFor(int n, int min_parallel, const std::function<void(int)>& fn) {
  const int max_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = std::min(max_threads, n);
  if (n < min_parallel || threads <= 1) {
    for (int i = 0; i < n; ++i) fn(i);
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  const int chunk = (n + threads - 1) / threads;
  for (int t = 1; t < threads; ++t) {
    const int begin = t * chunk;
    const int end = std::min(n, begin + chunk);
    if (begin >= end) break;
    pool.emplace_back([begin, end, &fn] {
      for (int i = begin; i < end; ++i) fn(i);
    });
  }
  for (int i = 0; i < std::min(n, chunk); ++i) fn(i);
  for (auto& thread : pool) thread.join();
}

float RmsScale(const float* x, int dim, float eps) {
  double sum = 0.0;
  for (int i = 0; i < dim; ++i) sum += static_cast<double>(x[i]) * x[i];
  return static_cast<float>(1.0 / std::sqrt(sum / dim + eps));
}

class CpuBackend final : public Backend {
 public:
  std::unique_ptr<Buffer> Allocate(size_t num_floats) override {
    return std::make_unique<HostBuffer>(num_floats);
  }
  void Upload(const float* host, float* device, size_t n) override {
    std::memcpy(device, host, n * sizeof(float));
  }
  void Download(const float* device, float* host, size_t n) override {
    std::memcpy(host, device, n * sizeof(float));
  }

  void Embedding(absl::Span<const int32_t> token_ids, const float* table, int hidden,
                 float* out) override {
    for (size_t t = 0; t < token_ids.size(); ++t) {
      std::memcpy(out + t * hidden, table + static_cast<size_t>(token_ids[t]) * hidden,
                  hidden * sizeof(float));
    }
  }

  void RmsNorm(const float* x, const float* weight, int rows, int dim, float eps,
               float* out) override {
    for (int r = 0; r < rows; ++r) {
      const float* row = x + static_cast<size_t>(r) * dim;
      float* dst = out + static_cast<size_t>(r) * dim;
      const float scale = RmsScale(row, dim, eps);
      for (int i = 0; i < dim; ++i) dst[i] = row[i] * scale * weight[i];
    }
  }

  void AddRmsNorm(float* residual, const float* x, const float* weight, int rows, int dim,
                  float eps, float* out) override {
    const size_t n = static_cast<size_t>(rows) * dim;
    for (size_t i = 0; i < n; ++i) residual[i] += x[i];
    RmsNorm(residual, weight, rows, dim, eps, out);
  }

  void Linear(const float* x, int rows, int in_dim, const float* weight, const float* bias,
              int out_dim, float* y) override {
    if (rows == 0) return;
    float beta = 0.0f;
    if (bias != nullptr) {
      for (int r = 0; r < rows; ++r) {
        std::memcpy(y + static_cast<size_t>(r) * out_dim, bias, out_dim * sizeof(float));
      }
      beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out_dim, in_dim, 1.0f, x, in_dim,
                weight, in_dim, beta, y, out_dim);
  }

  void Rope(float* q, float* k, absl::Span<const int32_t> positions, int num_q_heads,
            int num_kv_heads, int head_dim, const float* inv_freq) override {
    const int half = head_dim / 2;
    std::vector<float> cos_table(half), sin_table(half);
    for (size_t t = 0; t < positions.size(); ++t) {
      for (int i = 0; i < half; ++i) {
        // Angles in double: positions times frequencies lose digits in f32.
        const double angle = static_cast<double>(positions[t]) * inv_freq[i];
        cos_table[i] = static_cast<float>(std::cos(angle));
        sin_table[i] = static_cast<float>(std::sin(angle));
      }
      auto rotate = [&](float* head) {
        for (int i = 0; i < half; ++i) {
          const float x1 = head[i];
          const float x2 = head[i + half];
          head[i] = x1 * cos_table[i] - x2 * sin_table[i];
          head[i + half] = x2 * cos_table[i] + x1 * sin_table[i];
        }
      };
      for (int h = 0; h < num_q_heads; ++h) {
        rotate(q + (t * num_q_heads + h) * static_cast<size_t>(head_dim));
      }
      for (int h = 0; h < num_kv_heads; ++h) {
        rotate(k + (t * num_kv_heads + h) * static_cast<size_t>(head_dim));
      }
    }
  }

  void WriteKvCache(const float* k, const float* v, absl::Span<const int32_t> slot_mapping,
                    int num_kv_heads, int head_dim, int block_size, float* key_cache,
                    float* value_cache) override {
    const size_t block_floats = static_cast<size_t>(num_kv_heads) * block_size * head_dim;
    for (size_t t = 0; t < slot_mapping.size(); ++t) {
      const int32_t block = slot_mapping[t] / block_size;
      const int32_t offset = slot_mapping[t] % block_size;
      for (int h = 0; h < num_kv_heads; ++h) {
        const size_t src = (t * num_kv_heads + h) * static_cast<size_t>(head_dim);
        const size_t dst =
            block * block_floats + (static_cast<size_t>(h) * block_size + offset) * head_dim;
        std::memcpy(key_cache + dst, k + src, head_dim * sizeof(float));
        std::memcpy(value_cache + dst, v + src, head_dim * sizeof(float));
      }
    }
  }

  void PagedAttention(const PagedAttentionParams& p) override {
    const int num_seqs = static_cast<int>(p.context_lens.size());
    const int group = p.num_heads / p.num_kv_heads;
    const size_t block_floats = static_cast<size_t>(p.num_kv_heads) * p.block_size * p.head_dim;
    const size_t token_stride = static_cast<size_t>(p.num_heads) * p.head_dim;
    // One work item per (sequence, kv head): its K/V rows are read once for
    // all query heads of the group, and no two items write the same output.
    ParallelFor(num_seqs * p.num_kv_heads, 2, [&](int item) {
      const int s = item / p.num_kv_heads;
      const int kv_head = item % p.num_kv_heads;
      const int context = p.context_lens[s];
      const int q_begin = p.query_start[s];
      const int q_len = p.query_start[s + 1] - q_begin;
      const int32_t* table = p.block_tables.data() + static_cast<size_t>(s) * p.max_blocks_per_seq;
      // Gather this kv head's keys and values into contiguous rows.
      std::vector<const float*> keys(context), values(context);
      for (int j = 0; j < context; ++j) {
        const size_t at =
            table[j / p.block_size] * block_floats +
            (static_cast<size_t>(kv_head) * p.block_size + j % p.block_size) * p.head_dim;
        keys[j] = p.key_cache + at;
        values[j] = p.value_cache + at;
      }
      std::vector<float> scores(context);
      std::vector<float> accum(p.head_dim);
      for (int i = 0; i < q_len; ++i) {
        const int position = context - q_len + i;  // Attends keys [0, position].
        for (int g = 0; g < group; ++g) {
          const int head = kv_head * group + g;
          const size_t row = (q_begin + i) * token_stride + static_cast<size_t>(head) * p.head_dim;
          const float* query = p.query + row;
          float max_score = -INFINITY;
          for (int j = 0; j <= position; ++j) {
            float dot = 0.0f;
            for (int d = 0; d < p.head_dim; ++d) dot += query[d] * keys[j][d];
            scores[j] = dot * p.scale;
            max_score = std::max(max_score, scores[j]);
          }
          float denom = 0.0f;
          std::fill(accum.begin(), accum.end(), 0.0f);
          for (int j = 0; j <= position; ++j) {
            const float weight = std::exp(scores[j] - max_score);
            denom += weight;
            for (int d = 0; d < p.head_dim; ++d) accum[d] += weight * values[j][d];
          }
          float* out = p.output + row;
          for (int d = 0; d < p.head_dim; ++d) out[d] = accum[d] / denom;
        }
      }
    });
  }

  void SiluAndMul(const float* gate_up, int rows, int dim, float* out) override {
    for (int r = 0; r < rows; ++r) {
      const float* gate = gate_up + static_cast<size_t>(r) * 2 * dim;
      const float* up = gate + dim;
      float* dst = out + static_cast<size_t>(r) * dim;
      for (int i = 0; i < dim; ++i) dst[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
    }
  }

  void GatherRows(const float* src, absl::Span<const int32_t> rows, int dim, float* out) override {
    for (size_t i = 0; i < rows.size(); ++i) {
      std::memcpy(out + i * dim, src + static_cast<size_t>(rows[i]) * dim, dim * sizeof(float));
    }
  }

  void CopyBlocks(float* cache, size_t block_floats, absl::Span<const BlockPair> pairs) override {
    for (const BlockPair& pair : pairs) {
      std::memcpy(cache + pair.dst * block_floats, cache + pair.src * block_floats,
                  block_floats * sizeof(float));
    }
  }

  void SwapBlocks(float* device, float* host, size_t block_floats,
                  absl::Span<const BlockPair> pairs, bool to_host) override {
    float* src_base = to_host ? device : host;
    float* dst_base = to_host ? host : device;
    for (const BlockPair& pair : pairs) {
      std::memcpy(dst_base + pair.dst * block_floats, src_base + pair.src * block_floats,
                  block_floats * sizeof(float));
    }
  }
};

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend() { return std::make_unique<CpuBackend>(); }

}  // namespace pagoda::worker
