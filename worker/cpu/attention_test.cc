// The CPU backend's paged attention against a plain contiguous float64
// attention, and its cache operations (write, copy, swap) for exactness.

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/cache_engine.h"
#include "worker/cpu/cpu_backend.h"

namespace pagoda::worker {
namespace {

// A value no computation produces, so an unread/unwritten slot is visible.
constexpr float kSentinel = -12345.0f;

struct AttentionShape {
  int block_size;
  int head_dim;
  int num_heads;
  int num_kv_heads;
};

// One sequence of the call: context_len tokens in total, the last query_len
// of which are queries this step.
struct SequenceCase {
  int context_len;
  int query_len;
};

std::vector<float> RandomVector(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

// Plain causal attention over contiguous K/V [context, kv_heads, head_dim] in
// float64: the independent reference.
std::vector<double> ReferenceAttention(const std::vector<float>& query, int query_len,
                                       const std::vector<float>& keys,
                                       const std::vector<float>& values, int context_len,
                                       const AttentionShape& shape) {
  const int group = shape.num_heads / shape.num_kv_heads;
  const int d = shape.head_dim;
  std::vector<double> out(static_cast<size_t>(query_len) * shape.num_heads * d, 0.0);
  for (int i = 0; i < query_len; ++i) {
    const int position = context_len - query_len + i;
    for (int h = 0; h < shape.num_heads; ++h) {
      const int kv = h / group;
      const float* q = &query[(static_cast<size_t>(i) * shape.num_heads + h) * d];
      std::vector<double> scores(position + 1);
      double max_score = -INFINITY;
      for (int j = 0; j <= position; ++j) {
        const float* k = &keys[(static_cast<size_t>(j) * shape.num_kv_heads + kv) * d];
        double dot = 0.0;
        for (int x = 0; x < d; ++x) dot += static_cast<double>(q[x]) * k[x];
        scores[j] = dot / std::sqrt(static_cast<double>(d));
        max_score = std::max(max_score, scores[j]);
      }
      double denom = 0.0;
      for (double& s : scores) denom += (s = std::exp(s - max_score));
      double* o = &out[(static_cast<size_t>(i) * shape.num_heads + h) * d];
      for (int j = 0; j <= position; ++j) {
        const float* v = &values[(static_cast<size_t>(j) * shape.num_kv_heads + kv) * d];
        for (int x = 0; x < d; ++x) o[x] += scores[j] / denom * v[x];
      }
    }
  }
  return out;
}

// Runs one PagedAttention call over `sequences` with shuffled block tables
// and returns the largest |paged - reference|.
double MaxAttentionError(const AttentionShape& shape, const std::vector<SequenceCase>& sequences,
                         uint32_t seed) {
  std::mt19937 rng(seed);
  auto backend = CreateCpuBackend();
  const int bs = shape.block_size;
  int total_blocks = 0;
  for (const auto& seq : sequences) total_blocks += (seq.context_len + bs - 1) / bs;
  // Spare blocks so tables skip ids and are not a permutation of 0..n-1.
  const int num_blocks = total_blocks * 2 + 3;
  std::vector<int32_t> free_blocks(num_blocks);
  std::iota(free_blocks.begin(), free_blocks.end(), 0);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);

  const size_t block_floats = static_cast<size_t>(shape.num_kv_heads) * bs * shape.head_dim;
  auto key_cache = backend->Allocate(block_floats * num_blocks);
  auto value_cache = backend->Allocate(block_floats * num_blocks);
  std::fill_n(key_cache->data(), key_cache->size(), kSentinel);
  std::fill_n(value_cache->data(), value_cache->size(), kSentinel);

  const size_t kv_row = static_cast<size_t>(shape.num_kv_heads) * shape.head_dim;
  const size_t q_row = static_cast<size_t>(shape.num_heads) * shape.head_dim;
  int max_blocks = 0;
  for (const auto& seq : sequences)
    max_blocks = std::max(max_blocks, (seq.context_len + bs - 1) / bs);
  std::vector<int32_t> query_start = {0}, context_lens, tables;
  std::vector<float> query;
  std::vector<std::vector<float>> keys, values, queries;
  size_t next_free = 0;
  for (const auto& seq : sequences) {
    const int blocks = (seq.context_len + bs - 1) / bs;
    std::vector<int32_t> table(free_blocks.begin() + next_free,
                               free_blocks.begin() + next_free + blocks);
    next_free += blocks + 1;  // Leave a gap between sequences.
    keys.push_back(RandomVector(seq.context_len * kv_row, rng));
    values.push_back(RandomVector(seq.context_len * kv_row, rng));
    std::vector<int32_t> slots(seq.context_len);
    for (int t = 0; t < seq.context_len; ++t) slots[t] = table[t / bs] * bs + t % bs;
    backend->WriteKvCache(keys.back().data(), values.back().data(), slots, shape.num_kv_heads,
                          shape.head_dim, bs, key_cache->data(), value_cache->data());
    queries.push_back(RandomVector(seq.query_len * q_row, rng));
    query.insert(query.end(), queries.back().begin(), queries.back().end());
    query_start.push_back(query_start.back() + seq.query_len);
    context_lens.push_back(seq.context_len);
    table.resize(max_blocks, 0);
    tables.insert(tables.end(), table.begin(), table.end());
  }

  std::vector<float> output(query.size(), kSentinel);
  PagedAttentionParams params;
  params.query = query.data();
  params.output = output.data();
  params.key_cache = key_cache->data();
  params.value_cache = value_cache->data();
  params.num_heads = shape.num_heads;
  params.num_kv_heads = shape.num_kv_heads;
  params.head_dim = shape.head_dim;
  params.block_size = bs;
  params.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape.head_dim)));
  params.query_start = query_start;
  params.context_lens = context_lens;
  params.block_tables = tables;
  params.max_blocks_per_seq = max_blocks;
  backend->PagedAttention(params);

  double max_error = 0.0;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const auto expected = ReferenceAttention(queries[s], sequences[s].query_len, keys[s], values[s],
                                             sequences[s].context_len, shape);
    for (size_t i = 0; i < expected.size(); ++i) {
      const double actual = output[query_start[s] * q_row + i];
      max_error = std::max(max_error, std::abs(actual - expected[i]));
      if (!std::isfinite(actual)) return INFINITY;
    }
  }
  return max_error;
}

TEST(CpuPagedAttentionTest, MatchesContiguousReferenceOverShapes) {
  const std::vector<int> block_sizes = {8, 16, 32};
  const std::vector<int> head_dims = {3, 64, 80, 128};
  // GQA ratios 1, 4 and 8.
  const std::vector<std::pair<int, int>> heads = {{2, 2}, {8, 2}, {8, 1}};
  uint32_t seed = 1;
  for (int bs : block_sizes) {
    for (int d : head_dims) {
      for (auto [num_heads, num_kv_heads] : heads) {
        const AttentionShape shape{bs, d, num_heads, num_kv_heads};
        std::mt19937 rng(seed);
        std::uniform_int_distribution<int> length(2, 70);
        const int prefix = length(rng);
        const int decode_context = length(rng);
        // Mixed in one call: decode with context 1, a decode over a context
        // that is not a multiple of the block size, a fresh prefill, a
        // prefill after a cached prefix, a decode exactly at a block edge.
        const std::vector<SequenceCase> sequences = {
            {1, 1}, {decode_context, 1}, {prefix, prefix}, {prefix + 13, 13}, {2 * bs, 1},
        };
        const double error = MaxAttentionError(shape, sequences, seed++);
        EXPECT_LT(error, 2e-5) << "block_size " << bs << " head_dim " << d << " heads " << num_heads
                               << "/" << num_kv_heads;
      }
    }
  }
}

TEST(CpuPagedAttentionTest, SingleTokenContextReturnsItsValue) {
  // With one key the softmax weight is exactly 1: output = that value.
  const AttentionShape shape{16, 5, 4, 2};
  EXPECT_LT(MaxAttentionError(shape, {{1, 1}}, 99), 1e-7);
}

TEST(CpuPagedAttentionTest, LongContextManyBlocks) {
  const AttentionShape shape{16, 64, 8, 1};
  EXPECT_LT(MaxAttentionError(shape, {{300, 1}, {257, 40}, {33, 33}}, 7), 2e-5);
}

KvCacheShape SmallCacheShape(int head_dim, int block_size) {
  return KvCacheShape{
      .num_layers = 2, .num_kv_heads = 3, .block_size = block_size, .head_dim = head_dim};
}

// Fills every GPU block of every layer with distinct values.
void FillDistinct(CacheEngine& cache, int num_blocks, float base) {
  const size_t n = cache.shape().floats_per_layer_block() * num_blocks;
  for (int layer = 0; layer < cache.shape().num_layers; ++layer) {
    for (size_t i = 0; i < n; ++i) {
      cache.key_cache(layer)[i] = base + layer * 1e6f + static_cast<float>(i);
      cache.value_cache(layer)[i] = -(base + layer * 1e6f + static_cast<float>(i));
    }
  }
}

std::vector<float> GpuBlock(CacheEngine& cache, int layer, int block, bool value) {
  const size_t n = cache.shape().floats_per_layer_block();
  const float* base = (value ? cache.value_cache(layer) : cache.key_cache(layer)) + block * n;
  return std::vector<float>(base, base + n);
}

std::vector<float> CpuBlock(CacheEngine& cache, int layer, int block, bool value) {
  const size_t n = cache.shape().floats_per_layer_block();
  const float* base =
      (value ? cache.cpu_value_cache(layer) : cache.cpu_key_cache(layer)) + block * n;
  return std::vector<float>(base, base + n);
}

TEST(CpuCacheOpsTest, WriteKvCachePutsEachTokenInItsSlotOnly) {
  for (int head_dim : {64, 80, 256}) {
    for (int bs : {8, 16, 32}) {
      auto backend = CreateCpuBackend();
      const int kv_heads = 3, num_blocks = 7;
      const size_t block_floats = static_cast<size_t>(kv_heads) * bs * head_dim;
      auto keys = backend->Allocate(block_floats * num_blocks);
      auto values = backend->Allocate(block_floats * num_blocks);
      std::fill_n(keys->data(), keys->size(), kSentinel);
      std::fill_n(values->data(), values->size(), kSentinel);
      std::mt19937 rng(head_dim + bs);
      std::vector<int32_t> slots(num_blocks * bs);
      std::iota(slots.begin(), slots.end(), 0);
      std::shuffle(slots.begin(), slots.end(), rng);
      slots.resize(slots.size() / 2 + 1);  // Some slots stay unwritten.
      const size_t row = static_cast<size_t>(kv_heads) * head_dim;
      const auto k = RandomVector(slots.size() * row, rng);
      const auto v = RandomVector(slots.size() * row, rng);
      backend->WriteKvCache(k.data(), v.data(), slots, kv_heads, head_dim, bs, keys->data(),
                            values->data());
      std::vector<bool> written(num_blocks * bs, false);
      for (size_t t = 0; t < slots.size(); ++t) {
        written[slots[t]] = true;
        const int block = slots[t] / bs, offset = slots[t] % bs;
        for (int h = 0; h < kv_heads; ++h) {
          for (int x = 0; x < head_dim; ++x) {
            const size_t at =
                block * block_floats + (static_cast<size_t>(h) * bs + offset) * head_dim + x;
            ASSERT_EQ(keys->data()[at], k[t * row + h * head_dim + x]);
            ASSERT_EQ(values->data()[at], v[t * row + h * head_dim + x]);
          }
        }
      }
      for (int slot = 0; slot < num_blocks * bs; ++slot) {
        if (written[slot]) continue;
        const int block = slot / bs, offset = slot % bs;
        for (int h = 0; h < kv_heads; ++h) {
          const size_t at =
              block * block_floats + (static_cast<size_t>(h) * bs + offset) * head_dim;
          ASSERT_EQ(keys->data()[at], kSentinel) << "slot " << slot;
          ASSERT_EQ(values->data()[at], kSentinel) << "slot " << slot;
        }
      }
    }
  }
}

TEST(CpuCacheOpsTest, CopyBlocksCopiesExactlyAndLeavesOthers) {
  for (int head_dim : {64, 80, 256}) {
    for (int bs : {8, 16, 32}) {
      auto backend = CreateCpuBackend();
      CacheEngine cache(backend.get(), SmallCacheShape(head_dim, bs), 6, 2);
      FillDistinct(cache, 6, 1.0f);
      std::vector<std::vector<float>> before_keys, before_values;
      for (int b = 0; b < 6; ++b) {
        before_keys.push_back(GpuBlock(cache, 1, b, false));
        before_values.push_back(GpuBlock(cache, 1, b, true));
      }
      cache.Copy({{0, 3}, {5, 1}});
      for (int layer = 0; layer < 2; ++layer) {
        EXPECT_EQ(GpuBlock(cache, layer, 3, false), GpuBlock(cache, layer, 0, false));
        EXPECT_EQ(GpuBlock(cache, layer, 3, true), GpuBlock(cache, layer, 0, true));
        EXPECT_EQ(GpuBlock(cache, layer, 1, false), GpuBlock(cache, layer, 5, false));
        EXPECT_EQ(GpuBlock(cache, layer, 1, true), GpuBlock(cache, layer, 5, true));
      }
      for (int b : {0, 2, 4, 5}) {
        EXPECT_EQ(GpuBlock(cache, 1, b, false), before_keys[b]) << "block " << b;
        EXPECT_EQ(GpuBlock(cache, 1, b, true), before_values[b]) << "block " << b;
      }
      EXPECT_EQ(GpuBlock(cache, 1, 3, false), before_keys[0]);
    }
  }
}

TEST(CpuCacheOpsTest, SwapOutAndInRoundTripsExactly) {
  for (int head_dim : {64, 80, 256}) {
    for (int bs : {8, 16, 32}) {
      auto backend = CreateCpuBackend();
      CacheEngine cache(backend.get(), SmallCacheShape(head_dim, bs), 5, 3);
      FillDistinct(cache, 5, 7.0f);
      std::vector<std::vector<float>> original;
      for (int layer = 0; layer < 2; ++layer) {
        for (int b = 0; b < 5; ++b) {
          original.push_back(GpuBlock(cache, layer, b, false));
          original.push_back(GpuBlock(cache, layer, b, true));
        }
      }
      auto gpu = [&](int layer, int block, bool value) {
        return original[(layer * 5 + block) * 2 + (value ? 1 : 0)];
      };
      cache.SwapOut({{4, 0}, {1, 2}});
      for (int layer = 0; layer < 2; ++layer) {
        for (bool value : {false, true}) {
          EXPECT_EQ(CpuBlock(cache, layer, 0, value), gpu(layer, 4, value));
          EXPECT_EQ(CpuBlock(cache, layer, 2, value), gpu(layer, 1, value));
        }
      }
      // Overwrite the GPU copies, then bring them back into other blocks.
      FillDistinct(cache, 5, 1e5f);
      cache.SwapIn({{0, 3}, {2, 0}});
      for (int layer = 0; layer < 2; ++layer) {
        for (bool value : {false, true}) {
          EXPECT_EQ(GpuBlock(cache, layer, 3, value), gpu(layer, 4, value));
          EXPECT_EQ(GpuBlock(cache, layer, 0, value), gpu(layer, 1, value));
          EXPECT_NE(GpuBlock(cache, layer, 1, value), gpu(layer, 1, value));
        }
      }
    }
  }
}

TEST(CacheShapeTest, BytesPerBlockCountsAllLayersKeyAndValue) {
  const KvCacheShape shape{.num_layers = 3, .num_kv_heads = 2, .block_size = 16, .head_dim = 8};
  EXPECT_EQ(shape.floats_per_layer_block(), 2u * 16 * 8);
  EXPECT_EQ(shape.bytes_per_block(), 2 * 3 * 2 * 16 * 8 * 4);
}

}  // namespace
}  // namespace pagoda::worker
