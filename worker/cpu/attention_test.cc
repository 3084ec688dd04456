// The CPU backend's paged attention against a plain contiguous float64
// attention, over f32, bf16, f16 and FP8 E4M3 (with k/v scales) KV caches,
// and its cache operations (write, copy, swap) for exactness.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/fp8.h"
#include "gtest/gtest.h"
#include "tests/support/step_batch_test_util.h"
#include "worker/cache_engine.h"
#include "worker/cpu/cpu_attention.h"
#include "worker/cpu/cpu_backend.h"
#include "worker/cpu/simd.h"

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

// `values` as a cache of `dtype` holds them: rounded to nearest even; for
// FP8 with `scale`, E4M3(x / scale) (saturated) read back times scale.
std::vector<float> RoundTo(DType dtype, const std::vector<float>& values, float scale = 1.0f) {
  std::vector<float> scaled = values;
  for (float& x : scaled) x /= scale;
  std::vector<char> narrow(values.size() * DTypeSize(dtype));
  ConvertFromFloat(dtype, scaled.data(), values.size(), narrow.data());
  std::vector<float> out(values.size());
  ConvertToFloat(dtype, narrow.data(), values.size(), out.data());
  for (float& x : out) x *= scale;
  return out;
}

// An FP8 cache's scales (1 for the others).
struct CacheScales {
  float k = 1.0f;
  float v = 1.0f;
};

// A FlatBatch carrying just what the cache ops and attention read.
FlatBatch AttentionBatch(std::vector<int32_t> slots, std::vector<int32_t> query_start,
                         std::vector<int32_t> context_lens, std::vector<int32_t> tables,
                         int max_blocks_per_seq) {
  FlatBatch batch;
  batch.input_ids.assign(slots.size(), 0);
  batch.positions.assign(slots.size(), 0);
  batch.slot_mapping = std::move(slots);
  batch.query_start = std::move(query_start);
  batch.context_lens = std::move(context_lens);
  batch.block_tables = std::move(tables);
  batch.max_blocks_per_seq = max_blocks_per_seq;
  return batch;
}

// Writes k and v rows into the caches at `slots`, through WriteKvCache.
void WriteRows(Backend& backend, const std::vector<float>& k, const std::vector<float>& v,
               std::vector<int32_t> slots, const KvCacheLayer& cache) {
  const UploadedStepBatch step(&backend, AttentionBatch(std::move(slots), {0}, {}, {}, 0));
  backend.WriteKvCache(k.data(), v.data(), int64_t{cache.num_kv_heads} * cache.head_dim, step.get(),
                       cache);
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
// and a `cache_dtype` cache, and returns the largest |paged - reference|, the
// reference attending over the K/V as the cache holds them (rounded). The
// output goes to `output` when given.
// With `kernels`, the items run through AttendItem at that SIMD level
// instead of the backend's (its best level).
double MaxAttentionError(const AttentionShape& shape, const std::vector<SequenceCase>& sequences,
                         uint32_t seed, DType cache_dtype = DType::kF32,
                         std::vector<float>* output_copy = nullptr,
                         const SimdKernels* kernels = nullptr, int query_row_padding = 0,
                         CacheScales scales = {}) {
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

  const size_t block_elements = static_cast<size_t>(shape.num_kv_heads) * bs * shape.head_dim;
  auto key_cache = backend->Allocate(cache_dtype, block_elements * num_blocks);
  auto value_cache = backend->Allocate(cache_dtype, block_elements * num_blocks);
  const std::vector<float> sentinels(block_elements * num_blocks, kSentinel);
  ConvertFromFloat(cache_dtype, sentinels.data(), sentinels.size(), key_cache->raw());
  ConvertFromFloat(cache_dtype, sentinels.data(), sentinels.size(), value_cache->raw());
  const KvCacheLayer cache{.key = key_cache->raw(),
                           .value = value_cache->raw(),
                           .dtype = cache_dtype,
                           .num_kv_heads = shape.num_kv_heads,
                           .block_size = bs,
                           .head_dim = shape.head_dim,
                           .k_scale = scales.k,
                           .v_scale = scales.v};

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
    WriteRows(*backend, keys.back(), values.back(), slots, cache);
    keys.back() = RoundTo(cache_dtype, keys.back(), scales.k);
    values.back() = RoundTo(cache_dtype, values.back(), scales.v);
    queries.push_back(RandomVector(seq.query_len * q_row, rng));
    // Each token's row, then `query_row_padding` floats attention must skip
    // (the k and v of a fused QKV row).
    for (int t = 0; t < seq.query_len; ++t) {
      const auto row = queries.back().begin() + t * q_row;
      query.insert(query.end(), row, row + q_row);
      query.insert(query.end(), query_row_padding, kSentinel);
    }
    query_start.push_back(query_start.back() + seq.query_len);
    context_lens.push_back(seq.context_len);
    table.resize(max_blocks, 0);
    tables.insert(tables.end(), table.begin(), table.end());
  }

  std::vector<float> output(query_start.back() * q_row, kSentinel);
  std::vector<int32_t> no_slots(query_start.back(), 0);
  const UploadedStepBatch step(
      backend.get(), AttentionBatch(no_slots, query_start, context_lens, tables, max_blocks));
  const PagedAttentionParams params{
      .query = query.data(),
      .query_token_stride = static_cast<int64_t>(q_row + query_row_padding),
      .output = output.data(),
      .cache = cache,
      .num_heads = shape.num_heads,
      .scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape.head_dim))),
      .batch = &step.get()};
  if (kernels == nullptr) {
    backend->PagedAttention(params);
  } else {
    for (int64_t item = 0; item < static_cast<int64_t>(sequences.size()) * shape.num_kv_heads;
         ++item) {
      AttendItem(*kernels, params, item);
    }
  }
  if (output_copy != nullptr) *output_copy = output;

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
  // GQA ratios 1, 4, 8 and 6 (a group of four heads and two single ones).
  const std::vector<std::pair<int, int>> heads = {{2, 2}, {8, 2}, {8, 1}, {6, 1}};
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

// Every SIMD level this CPU runs through AttendItem (the backend uses the
// best only): row by row where a level has no panel kernels, head_dim is not
// a multiple of 16 or the item has fewer query rows than the level's
// blocked_attention_min_rows (the one-token sequences at AVX-512), blocked
// otherwise; GQA groups of 4, 8, 6 and 9.
// Queries read from a fused QKV product's rows: each token's q heads, then
// its k and v heads, which attention must skip.
TEST(CpuPagedAttentionTest, QueryRowsThroughTheFusedProductsStride) {
  for (SimdLevel level : SupportedSimdLevels()) {
    for (auto [num_heads, num_kv_heads] : std::vector<std::pair<int, int>>{{8, 2}, {6, 1}}) {
      const AttentionShape shape{16, 64, num_heads, num_kv_heads};
      const std::vector<SequenceCase> sequences = {{1, 1}, {150, 1}, {70, 70}, {90, 13}};
      EXPECT_LT(MaxAttentionError(shape, sequences, 23, DType::kF32, nullptr,
                                  &SimdKernelsFor(level), 2 * num_kv_heads * 64),
                2e-5)
          << SimdLevelName(level) << " heads " << num_heads << "/" << num_kv_heads;
    }
  }
}

TEST(CpuPagedAttentionTest, EveryLevelMatchesReference) {
  const std::vector<std::pair<int, int>> heads = {{8, 2}, {8, 1}, {6, 1}, {9, 1}};
  for (SimdLevel level : SupportedSimdLevels()) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kFp8E4M3}) {
      for (int head_dim : {3, 24, 64}) {
        for (auto [num_heads, num_kv_heads] : heads) {
          const AttentionShape shape{16, head_dim, num_heads, num_kv_heads};
          const std::vector<SequenceCase> sequences = {{1, 1}, {150, 1}, {70, 70}, {90, 13}};
          EXPECT_LT(MaxAttentionError(shape, sequences, 17, dtype, nullptr, &SimdKernelsFor(level)),
                    2e-5)
              << SimdLevelName(level) << " " << DTypeName(dtype) << " head_dim " << head_dim
              << " heads " << num_heads << "/" << num_kv_heads;
        }
      }
    }
  }
}

// Head_dim 16, which AVX-512 attends through attend16 (a row a call, 16
// keys' scores summed together, online softmax a chunk of up to 16 keys
// inside one cache block), and the other levels through score4/weigh4, at
// every level and cache dtype (FP8 with scales): blocks of 1, 5, 16 and 32
// keys (chunks cut by the block's end, odd keys in a bf16 pair), contexts
// of 1 to 300 keys, a prompt of 3 tokens (row by row below AVX-512's
// blocked_attention_min_rows) and GQA groups of 1 and 4.
TEST(CpuPagedAttentionTest, HeadDim16MatchesReferenceAtEveryLevel) {
  const std::vector<SequenceCase> sequences = {{1, 1},  {2, 1},  {15, 1},  {16, 1},
                                               {17, 1}, {33, 1}, {300, 1}, {45, 3}};
  for (SimdLevel level : SupportedSimdLevels()) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kFp8E4M3, DType::kFp8E5M2}) {
      const bool fp8 = dtype == DType::kFp8E4M3 || dtype == DType::kFp8E5M2;
      const CacheScales scales = fp8 ? CacheScales{1.0f / 64, 1.0f / 256} : CacheScales{};
      for (int block_size : {1, 5, 16, 32}) {
        for (auto [num_heads, num_kv_heads] :
             std::vector<std::pair<int, int>>{{4, 4}, {8, 2}, {2, 1}, {4, 2}, {6, 2}}) {
          const AttentionShape shape{block_size, 16, num_heads, num_kv_heads};
          EXPECT_LT(MaxAttentionError(shape, sequences, 31 + block_size, dtype, nullptr,
                                      &SimdKernelsFor(level), 0, scales),
                    2e-5)
              << SimdLevelName(level) << " " << DTypeName(dtype) << " block " << block_size
              << " heads " << num_heads << "/" << num_kv_heads;
        }
      }
    }
  }
}

// A 16-bit cache is read exactly as stored: widened to f32 inside the SIMD
// dot products and weighted sums, so against a float64 reference over the rounded
// K/V the error is the f32 arithmetic's alone, as for an f32 cache.
TEST(CpuPagedAttentionTest, SixteenBitCachesMatchReferenceOverTheirRoundedValues) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int head_dim : {3, 64, 80, 128}) {
      const AttentionShape shape{16, head_dim, 8, 2};
      const std::vector<SequenceCase> sequences = {{1, 1}, {37, 1}, {50, 50}, {70, 13}};
      EXPECT_LT(MaxAttentionError(shape, sequences, 5, dtype), 2e-5)
          << DTypeName(dtype) << " head_dim " << head_dim;
    }
  }
}

// Against the f32 cache, the outputs move by the K/V rounding only. Inputs
// are in [-1, 1]; bf16 keeps 8 significant bits (relative step 2^-8), f16
// 11 (2^-11), and attention averages values, so the stated bounds are about
// one rounding step of the largest input: 1e-2 for bf16, 2e-3 for f16.
TEST(CpuPagedAttentionTest, SixteenBitCachesStayNearTheF32Cache) {
  const AttentionShape shape{16, 128, 8, 2};
  const std::vector<SequenceCase> sequences = {{1, 1}, {200, 1}, {64, 64}, {90, 7}};
  std::vector<float> f32_out, out;
  ASSERT_LT(MaxAttentionError(shape, sequences, 11, DType::kF32, &f32_out), 2e-5);
  for (const auto& [dtype, tolerance] :
       {std::pair{DType::kBF16, 1e-2}, std::pair{DType::kF16, 2e-3}}) {
    ASSERT_LT(MaxAttentionError(shape, sequences, 11, dtype, &out), 2e-5);
    ASSERT_EQ(out.size(), f32_out.size());
    double max_diff = 0.0;
    for (size_t i = 0; i < out.size(); ++i) {
      max_diff = std::max(max_diff, std::abs(static_cast<double>(out[i]) - f32_out[i]));
    }
    EXPECT_LT(max_diff, tolerance) << DTypeName(dtype);
    EXPECT_GT(max_diff, 0.0) << DTypeName(dtype) << ": the cache was not narrowed";
  }
}

// An FP8 cache read at every level, both paths (row by row: the plain
// level, which has no panel kernels, and decodes below AVX-512's
// blocked_attention_min_rows; blocked otherwise), against the float64
// reference over E4M3(k / k_scale) * k_scale and the same for v: the scales
// folded into the query scale and the softmax weights must give what
// scaling every element would, up to f32 rounding. Scales of 1, small ones
// (codes up to 64 and 256) and one that saturates K at +-448 (inputs are in
// [-1, 1], 1 / 512 makes every |k| > 0.875 saturate in E4M3). E5M2 with
// the small scales.
TEST(CpuPagedAttentionTest, Fp8CacheWithScalesMatchesReferenceAtEveryLevel) {
  const CacheScales scale_cases[] = {{1.0f, 1.0f}, {1.0f / 64, 1.0f / 256}, {1.0f / 512, 0.3f}};
  for (SimdLevel level : SupportedSimdLevels()) {
    for (DType dtype : {DType::kFp8E4M3, DType::kFp8E5M2}) {
      for (auto [head_dim, block] : {std::pair{64, 8}, std::pair{80, 16}, std::pair{128, 32}}) {
        for (const CacheScales& scales : scale_cases) {
          // E5M2 shares every path with E4M3 but the widening: one case.
          if (dtype == DType::kFp8E5M2 && scales.k != scale_cases[1].k) continue;
          const AttentionShape shape{block, head_dim, 8, 2};
          // Contexts crossing blocks; decodes and prompts, one after a prefix.
          const std::vector<SequenceCase> sequences = {{1, 1}, {75, 1}, {40, 40}, {70, 13}};
          EXPECT_LT(MaxAttentionError(shape, sequences, 31, dtype, nullptr, &SimdKernelsFor(level),
                                      0, scales),
                    2e-5)
              << SimdLevelName(level) << " " << DTypeName(dtype) << " head_dim " << head_dim
              << " block " << block << " scales " << scales.k << " " << scales.v;
        }
      }
    }
  }
}

// Against the f32 cache, an FP8 cache moves the outputs by its rounding
// (E4M3: 3 mantissa bits, half a step is 1/16 of a value; E5M2: 2 bits),
// averaged by attention: within 0.05 (E4M3) and 0.1 (E5M2) for inputs in
// [-1, 1], but not zero.
TEST(CpuPagedAttentionTest, Fp8CacheStaysNearTheF32Cache) {
  const AttentionShape shape{16, 128, 8, 2};
  const std::vector<SequenceCase> sequences = {{1, 1}, {200, 1}, {64, 64}, {90, 7}};
  std::vector<float> f32_out, out;
  ASSERT_LT(MaxAttentionError(shape, sequences, 11, DType::kF32, &f32_out), 2e-5);
  for (const auto& [dtype, tolerance] :
       {std::pair{DType::kFp8E4M3, 0.05}, std::pair{DType::kFp8E5M2, 0.1}}) {
    ASSERT_LT(MaxAttentionError(shape, sequences, 11, dtype, &out), 2e-5);
    double max_diff = 0.0;
    for (size_t i = 0; i < out.size(); ++i) {
      max_diff = std::max(max_diff, std::abs(static_cast<double>(out[i]) - f32_out[i]));
    }
    EXPECT_LT(max_diff, tolerance) << DTypeName(dtype);
    EXPECT_GT(max_diff, 1e-3) << DTypeName(dtype) << ": the cache was not narrowed";
  }
}

// WriteKvCache divides by the layer's scales before rounding (as vLLM's
// cache ops): the codes are E4M3(k / k_scale), E4M3(v / v_scale), saturated.
TEST(CpuPagedAttentionTest, Fp8WriteDividesByTheScales) {
  auto backend = CreateCpuBackend();
  const int head_dim = 80, bs = 16;
  auto keys = backend->Allocate(DType::kFp8E4M3, static_cast<size_t>(bs) * head_dim);
  auto values = backend->Allocate(DType::kFp8E4M3, static_cast<size_t>(bs) * head_dim);
  std::mt19937 rng(3);
  std::vector<float> k = RandomVector(2 * head_dim, rng), v = RandomVector(2 * head_dim, rng);
  k[5] = 300.0f;  // 300 / 0.5 = 600: saturates to 448.
  WriteRows(*backend, k, v, {3, 9},
            KvCacheLayer{.key = keys->raw(),
                         .value = values->raw(),
                         .dtype = DType::kFp8E4M3,
                         .num_kv_heads = 1,
                         .block_size = bs,
                         .head_dim = head_dim,
                         .k_scale = 0.5f,
                         .v_scale = 1.0f / 128});
  for (int t = 0; t < 2; ++t) {
    const int slot = t == 0 ? 3 : 9;
    for (int i = 0; i < head_dim; ++i) {
      const auto* key_codes = static_cast<const uint8_t*>(keys->raw());
      const auto* value_codes = static_cast<const uint8_t*>(values->raw());
      ASSERT_EQ(key_codes[slot * head_dim + i], FloatToFp8E4M3(k[t * head_dim + i] / 0.5f)) << i;
      ASSERT_EQ(value_codes[slot * head_dim + i], FloatToFp8E4M3(v[t * head_dim + i] * 128.0f))
          << i;
    }
  }
  EXPECT_EQ(Fp8E4M3ToFloat(static_cast<const uint8_t*>(keys->raw())[3 * head_dim + 5]), 448.0f);
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

KvCacheShape SmallCacheShape(int head_dim, int block_size, DType dtype = DType::kF32) {
  return KvCacheShape{.num_layers = 2,
                      .num_kv_heads = 3,
                      .block_size = block_size,
                      .head_dim = head_dim,
                      .dtype = dtype};
}

char* Bytes(void* p) { return static_cast<char*>(p); }

// Fills every GPU block of every layer, K and V, with distinct bytes.
void FillDistinct(CacheEngine& cache, int num_blocks, int base) {
  const size_t n = cache.shape().bytes_per_layer_block() * num_blocks;
  for (int layer = 0; layer < cache.shape().num_layers; ++layer) {
    for (size_t i = 0; i < n; ++i) {
      Bytes(cache.layer(layer).key)[i] = static_cast<char>(base + layer * 7 + i * 13 + i / 251);
      Bytes(cache.layer(layer).value)[i] = static_cast<char>(base + layer * 5 + i * 29 + i / 241);
    }
  }
}

std::vector<char> GpuBlock(CacheEngine& cache, int layer, int block, bool value) {
  const size_t n = cache.shape().bytes_per_layer_block();
  const KvCacheLayer kv = cache.layer(layer);
  const char* base = Bytes(value ? kv.value : kv.key) + block * n;
  return std::vector<char>(base, base + n);
}

std::vector<char> CpuBlock(CacheEngine& cache, int layer, int block, bool value) {
  const size_t n = cache.shape().bytes_per_layer_block();
  const char* base =
      Bytes(value ? cache.cpu_value_cache(layer) : cache.cpu_key_cache(layer)) + block * n;
  return std::vector<char>(base, base + n);
}

class CpuCacheOpsTest : public testing::TestWithParam<DType> {};

TEST_P(CpuCacheOpsTest, WriteKvCachePutsEachTokenInItsSlotOnly) {
  const DType dtype = GetParam();
  const size_t width = DTypeSize(dtype);
  for (int head_dim : {64, 80, 256}) {
    for (int bs : {8, 16, 32}) {
      auto backend = CreateCpuBackend();
      const int kv_heads = 3, num_blocks = 7;
      const size_t block_elements = static_cast<size_t>(kv_heads) * bs * head_dim;
      auto keys = backend->Allocate(dtype, block_elements * num_blocks);
      auto values = backend->Allocate(dtype, block_elements * num_blocks);
      std::fill_n(Bytes(keys->raw()), keys->nbytes(), 0x5a);
      std::fill_n(Bytes(values->raw()), values->nbytes(), 0x5a);
      std::mt19937 rng(head_dim + bs);
      std::vector<int32_t> slots(num_blocks * bs);
      std::iota(slots.begin(), slots.end(), 0);
      std::shuffle(slots.begin(), slots.end(), rng);
      slots.resize(slots.size() / 2 + 1);  // Some slots stay unwritten.
      const size_t row = static_cast<size_t>(kv_heads) * head_dim;
      const auto k = RandomVector(slots.size() * row, rng);
      const auto v = RandomVector(slots.size() * row, rng);
      // What each row must become in the cache: ConvertFromFloat's rounding.
      std::vector<char> want_k(k.size() * width), want_v(v.size() * width);
      ConvertFromFloat(dtype, k.data(), k.size(), want_k.data());
      ConvertFromFloat(dtype, v.data(), v.size(), want_v.data());
      WriteRows(*backend, k, v, slots,
                KvCacheLayer{.key = keys->raw(),
                             .value = values->raw(),
                             .dtype = dtype,
                             .num_kv_heads = kv_heads,
                             .block_size = bs,
                             .head_dim = head_dim});
      std::vector<bool> written(num_blocks * bs, false);
      const size_t head_bytes = head_dim * width;
      for (size_t t = 0; t < slots.size(); ++t) {
        written[slots[t]] = true;
        const int block = slots[t] / bs, offset = slots[t] % bs;
        for (int h = 0; h < kv_heads; ++h) {
          const size_t at =
              (block * block_elements + (static_cast<size_t>(h) * bs + offset) * head_dim) * width;
          const size_t from = (t * row + h * head_dim) * width;
          ASSERT_EQ(std::memcmp(Bytes(keys->raw()) + at, want_k.data() + from, head_bytes), 0);
          ASSERT_EQ(std::memcmp(Bytes(values->raw()) + at, want_v.data() + from, head_bytes), 0);
        }
      }
      for (int slot = 0; slot < num_blocks * bs; ++slot) {
        if (written[slot]) continue;
        const int block = slot / bs, offset = slot % bs;
        for (int h = 0; h < kv_heads; ++h) {
          const size_t at =
              (block * block_elements + (static_cast<size_t>(h) * bs + offset) * head_dim) * width;
          ASSERT_EQ(Bytes(keys->raw())[at], 0x5a) << "slot " << slot;
          ASSERT_EQ(Bytes(values->raw())[at], 0x5a) << "slot " << slot;
        }
      }
    }
  }
}

TEST_P(CpuCacheOpsTest, CopyBlocksCopiesExactlyAndLeavesOthers) {
  for (int head_dim : {64, 80, 256}) {
    for (int bs : {8, 16, 32}) {
      auto backend = CreateCpuBackend();
      CacheEngine cache(backend.get(), SmallCacheShape(head_dim, bs, GetParam()), 6, 2);
      FillDistinct(cache, 6, 1);
      std::vector<std::vector<char>> before_keys, before_values;
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

TEST_P(CpuCacheOpsTest, SwapOutAndInRoundTripsExactly) {
  for (int head_dim : {64, 80, 256}) {
    for (int bs : {8, 16, 32}) {
      auto backend = CreateCpuBackend();
      CacheEngine cache(backend.get(), SmallCacheShape(head_dim, bs, GetParam()), 5, 3);
      FillDistinct(cache, 5, 7);
      std::vector<std::vector<char>> original;
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
      FillDistinct(cache, 5, 100);
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

INSTANTIATE_TEST_SUITE_P(CacheDTypes, CpuCacheOpsTest,
                         testing::Values(DType::kF32, DType::kBF16, DType::kF16, DType::kFp8E4M3,
                                         DType::kFp8E5M2),
                         [](const testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

TEST(CacheShapeTest, BytesPerBlockCountsAllLayersKeyAndValueInTheCacheDType) {
  const KvCacheShape shape{.num_layers = 3, .num_kv_heads = 2, .block_size = 16, .head_dim = 8};
  EXPECT_EQ(shape.elements_per_layer_block(), 2u * 16 * 8);
  EXPECT_EQ(shape.bytes_per_block(), 2 * 3 * 2 * 16 * 8 * 4);
  KvCacheShape half = shape;
  half.dtype = DType::kBF16;
  EXPECT_EQ(half.bytes_per_layer_block(), 2u * 16 * 8 * 2);
  EXPECT_EQ(2 * half.bytes_per_block(), shape.bytes_per_block());
}

}  // namespace
}  // namespace pagoda::worker
