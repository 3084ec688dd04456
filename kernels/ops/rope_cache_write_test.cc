// The fused rotary + KV-cache write (rope_cache_write.h) against the two
// launches it replaces (LaunchRotaryEmbedding, then LaunchReshapeAndCache)
// and against a float64 host reference: every rope scaling, odd head counts
// and GQA ratios, partial rotary, odd block sizes, padding slots, both
// vector and element-wise paths, bf16/f16/f32 activations and FP8 caches.
// Linked into kernels_ops_cache_ops_test (a GPU binary: skipped without one).

#include "kernels/ops/rope_cache_write.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/fp8.h"
#include "kernels/ops/cache_ops.h"
#include "kernels/ops/rope_cache.h"
#include "kernels/ops/rotary_embedding.h"
#include "tests/kernels/cuda_test_util.h"

namespace pagoda::kernels {
namespace {

using testing::Decode;
using testing::DeviceBuffer;
using testing::Encode;
using testing::RandomFloats;
using testing::RoundTrip;
using testing::Tolerance;

struct FusedCase {
  int head_dim, rotary_dim, heads, kv_heads, block_size;
  ScalarType dtype;
  bool fp8;
  RopeFrequencyScaling::Type scaling;
  int stride_pad;  // extra elements per QKV row (odd: the element-wise path)
  std::string Name() const {
    return "head " + std::to_string(head_dim) + " rot " + std::to_string(rotary_dim) + " heads " +
           std::to_string(heads) + "/" + std::to_string(kv_heads) + " block " +
           std::to_string(block_size) + " dtype " + std::to_string(static_cast<int>(dtype)) +
           (fp8 ? " fp8" : "") + " scaling " + std::to_string(static_cast<int>(scaling)) + " pad " +
           std::to_string(stride_pad);
  }
};

RopeFrequencyScaling ScalingOf(RopeFrequencyScaling::Type type) {
  RopeFrequencyScaling scaling;
  scaling.type = type;
  if (type == RopeFrequencyScaling::Type::kLlama3) {
    scaling.factor = 8;
    scaling.original_max_position_embeddings = 64;
  } else if (type == RopeFrequencyScaling::Type::kLinear) {
    scaling.factor = 2.5;
  }
  return scaling;
}

constexpr int kFusedTokens = 19;
constexpr int kFusedMaxPosition = 300;
constexpr int kFusedBlocks = 11;
constexpr float kKScale = 0.02f, kVScale = 0.05f;

// The inputs of one case on the host and the device, and room for both runs.
struct FusedFixture {
  FusedCase c;
  int row = 0;  // elements a QKV token row
  size_t elem = 0, cache_elem = 0, cache_bytes = 0;
  std::vector<float> qkv, cos_sin;
  std::vector<double> inv_freq;
  std::vector<int64_t> positions, slots;
  std::vector<uint8_t> poison;

  explicit FusedFixture(const FusedCase& fc) : c(fc) {
    row = (c.heads + 2 * c.kv_heads) * c.head_dim + c.stride_pad;
    elem = ScalarTypeSize(c.dtype);
    cache_elem = c.fp8 ? 1 : elem;
    cache_bytes = size_t{1} * kFusedBlocks * c.kv_heads * c.block_size * c.head_dim * cache_elem;
    std::mt19937 rng(c.head_dim * 7 + c.heads * 3 + c.block_size);
    qkv = RoundTrip(c.dtype, RandomFloats(size_t{1} * kFusedTokens * row, -2, 2, rng()));
    inv_freq = ComputeRopeInvFreq(c.rotary_dim, 500000.0, ScalingOf(c.scaling));
    cos_sin = BuildRopeCosSinCache(kFusedMaxPosition, inv_freq);
    positions.resize(kFusedTokens);
    for (int64_t& p : positions) p = rng() % kFusedMaxPosition;
    std::vector<int64_t> all(kFusedBlocks * c.block_size);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    slots.assign(all.begin(), all.begin() + kFusedTokens);
    for (int t = 1; t < kFusedTokens; t += 4) slots[t] = -1;  // padding tokens
    poison.resize(cache_bytes);
    for (uint8_t& b : poison) b = static_cast<uint8_t>(rng());
  }
};

// One run's device state: the QKV rows, tables and both caches.
struct FusedRun {
  DeviceBuffer qkv, cos_sin, positions, slots, key_cache, value_cache;
  explicit FusedRun(const FusedFixture& f)
      : qkv(f.qkv.size() * f.elem),
        cos_sin(f.cos_sin.size() * 4),
        positions(kFusedTokens * 8),
        slots(kFusedTokens * 8),
        key_cache(f.cache_bytes),
        value_cache(f.cache_bytes) {
    qkv.Upload(Encode(f.c.dtype, f.qkv));
    cos_sin.Upload(f.cos_sin);
    positions.Upload(f.positions);
    slots.Upload(f.slots);
    key_cache.Upload(f.poison);
    value_cache.Upload(f.poison);
  }
  char* at(const FusedFixture& f, int head) const {
    return qkv.as<char>() + size_t{1} * head * f.c.head_dim * f.elem;
  }
};

RopeCacheWriteParams FusedParams(const FusedFixture& f, const FusedRun& r) {
  RopeCacheWriteParams p;
  p.positions = r.positions.as<int64_t>();
  p.query = r.qkv.get();
  p.query_token_stride = f.row;
  p.key = r.at(f, f.c.heads);
  p.key_token_stride = f.row;
  p.value = r.at(f, f.c.heads + f.c.kv_heads);
  p.value_token_stride = f.row;
  p.cos_sin_cache = r.cos_sin.as<float>();
  p.key_cache = r.key_cache.get();
  p.value_cache = r.value_cache.get();
  p.slot_mapping = r.slots.as<int64_t>();
  p.num_tokens = kFusedTokens;
  p.num_heads = f.c.heads;
  p.num_kv_heads = f.c.kv_heads;
  p.head_dim = f.c.head_dim;
  p.rotary_dim = f.c.rotary_dim;
  p.block_size = f.c.block_size;
  p.dtype = f.c.dtype;
  p.storage = f.c.fp8 ? KvCacheStorage::kFp8E4M3 : KvCacheStorage::kDType;
  p.k_scale = kKScale;
  p.v_scale = kVScale;
  return p;
}

// The two launches the fused kernel replaces, on `r`.
cudaError_t RunSeparately(const FusedFixture& f, const FusedRun& r) {
  const RopeCacheWriteParams fused = FusedParams(f, r);
  RotaryEmbeddingParams rope;
  rope.positions = fused.positions;
  rope.query = fused.query;
  rope.query_token_stride = f.row;
  rope.key = r.at(f, f.c.heads);
  rope.key_token_stride = f.row;
  rope.cos_sin_cache = fused.cos_sin_cache;
  rope.num_tokens = kFusedTokens;
  rope.num_heads = f.c.heads;
  rope.num_kv_heads = f.c.kv_heads;
  rope.head_dim = f.c.head_dim;
  rope.rotary_dim = f.c.rotary_dim;
  rope.dtype = f.c.dtype;
  if (cudaError_t e = LaunchRotaryEmbedding(rope, nullptr); e != cudaSuccess) return e;
  ReshapeAndCacheParams write;
  write.key = fused.key;
  write.value = fused.value;
  write.key_token_stride = f.row;
  write.value_token_stride = f.row;
  write.key_cache = fused.key_cache;
  write.value_cache = fused.value_cache;
  write.slot_mapping = fused.slot_mapping;
  write.num_tokens = kFusedTokens;
  write.num_kv_heads = f.c.kv_heads;
  write.head_dim = f.c.head_dim;
  write.block_size = f.c.block_size;
  write.dtype = f.c.dtype;
  write.storage = fused.storage;
  write.k_scale = kKScale;
  write.v_scale = kVScale;
  return LaunchReshapeAndCache(write, nullptr);
}

// Values of `bytes` as elements of `type` (FP8 codes widened, times scale).
std::vector<float> WidenCache(const FusedFixture& f, const std::vector<uint8_t>& bytes,
                              float scale) {
  if (!f.c.fp8) return Decode(f.c.dtype, bytes);
  std::vector<float> values(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) values[i] = Fp8E4M3ToFloat(bytes[i]) * scale;
  return values;
}

// Fused and separate results agree: byte-equal, or (a different f32
// contraction of the rotation) one rounding of the type apart.
void ExpectSameBytes(const FusedFixture& f, const std::vector<uint8_t>& got,
                     const std::vector<uint8_t>& want, float scale, ScalarType type,
                     const char* what) {
  ASSERT_EQ(got.size(), want.size());
  const size_t width = type == ScalarType::kFp8E4M3 ? 1 : ScalarTypeSize(type);
  const double tol = type == ScalarType::kFp8E4M3 ? 0.13 : 2 * Tolerance(type);
  int failures = 0;
  for (size_t i = 0; i + width <= got.size() && failures < 5; i += width) {
    if (std::memcmp(&got[i], &want[i], width) == 0) continue;
    const std::vector<uint8_t> a(got.begin() + i, got.begin() + i + width);
    const std::vector<uint8_t> b(want.begin() + i, want.begin() + i + width);
    const float x =
        type == ScalarType::kFp8E4M3 ? Fp8E4M3ToFloat(a[0]) * scale : Decode(type, a)[0];
    const float y =
        type == ScalarType::kFp8E4M3 ? Fp8E4M3ToFloat(b[0]) * scale : Decode(type, b)[0];
    if (!(std::abs(x - y) <= tol * std::abs(y) + scale * 0.002)) {
      ADD_FAILURE() << what << " byte " << i << ": fused " << x << " separate " << y;
      ++failures;
    }
  }
  (void)f;
}

// The float64 reference: rotated k (rounded to the activation dtype, as the
// kernels round it) and v in every written slot; q rotated for every token.
void ExpectMatchesHostReference(const FusedFixture& f, const FusedRun& r) {
  const int half = f.c.rotary_dim / 2, hd = f.c.head_dim;
  const std::vector<float> q_got =
      Decode(f.c.dtype, r.qkv.Download<uint8_t>(f.qkv.size() * f.elem));
  const std::vector<float> k_cache =
      WidenCache(f, r.key_cache.Download<uint8_t>(f.cache_bytes), kKScale);
  const std::vector<float> v_cache =
      WidenCache(f, r.value_cache.Download<uint8_t>(f.cache_bytes), kVScale);
  const double tol = Tolerance(f.c.dtype);
  const double cache_tol = f.c.fp8 ? 0.07 : tol;  // half an E4M3 step
  int failures = 0;
  auto check = [&](double got, double want, double t, const char* what) {
    if (failures < 5 && !(std::abs(got - want) <= t * (1.0 + std::abs(want)))) {
      ADD_FAILURE() << what << ": got " << got << " want " << want;
      ++failures;
    }
  };
  for (int t = 0; t < kFusedTokens; ++t) {
    const int64_t slot = f.slots[t];
    const int64_t block = slot / f.c.block_size, offset = slot % f.c.block_size;
    for (int h = 0; h < f.c.heads + f.c.kv_heads; ++h) {
      const bool is_q = h < f.c.heads;
      const int kv = h - f.c.heads;
      if (!is_q && slot < 0) continue;
      const size_t base = size_t{1} * t * f.row + size_t{1} * h * hd;
      const size_t cache_row =
          is_q ? 0 : ((block * f.c.kv_heads + kv) * f.c.block_size + offset) * hd;
      for (int d = 0; d < hd; ++d) {
        double want = f.qkv[base + d];
        if (d < f.c.rotary_dim) {
          const int i = d % half;
          const double angle = f.positions[t] * f.inv_freq[i];
          const double x1 = f.qkv[base + i], x2 = f.qkv[base + i + half];
          want = d < half ? x1 * std::cos(angle) - x2 * std::sin(angle)
                          : x2 * std::cos(angle) + x1 * std::sin(angle);
        }
        if (is_q) {
          check(q_got[base + d], want, tol, "q");
        } else {
          check(k_cache[cache_row + d], want, cache_tol + tol, "k cache");
          const double v = f.qkv[size_t{1} * t * f.row + size_t{1} * (h + f.c.kv_heads) * hd + d];
          check(v_cache[cache_row + d], v, cache_tol, "v cache");
        }
      }
    }
  }
}

std::vector<FusedCase> FusedCases() {
  using Type = RopeFrequencyScaling::Type;
  constexpr auto kBf16 = ScalarType::kBF16, kF16 = ScalarType::kF16, kF32 = ScalarType::kF32;
  return {
      // Llama-3-8B's per-rank shape (GQA 4), llama3 scaling.
      {128, 128, 12, 3, 16, kBf16, false, Type::kLlama3, 0},
      {64, 64, 5, 1, 8, kF16, false, Type::kLinear, 0},      // GQA 5, odd heads
      {96, 64, 7, 7, 32, kBf16, false, Type::kNone, 0},      // partial rotary, MHA
      {36, 36, 3, 1, 5, kF32, false, Type::kNone, 0},        // element-wise path
      {128, 128, 6, 2, 16, kBf16, false, Type::kLlama3, 1},  // odd stride: element-wise
      {128, 128, 6, 2, 16, kBf16, true, Type::kLlama3, 0},   // FP8 cache, 8-code runs
      {64, 64, 9, 3, 7, kF16, true, Type::kLinear, 0},
      {96, 32, 3, 1, 16, kF32, true, Type::kNone, 0},  // FP8, f32 runs of 4
      {36, 36, 5, 5, 3, kBf16, true, Type::kNone, 3},  // FP8, element-wise
  };
}

TEST(RopeCacheWriteTest, EqualsRotaryThenReshapeAndCacheAndTheHostReference) {
  for (const FusedCase& c : FusedCases()) {
    SCOPED_TRACE(c.Name());
    const FusedFixture f(c);
    FusedRun fused(f), separate(f);
    PAGODA_ASSERT_CUDA_OK(LaunchRopeCacheWrite(FusedParams(f, fused), nullptr));
    PAGODA_ASSERT_CUDA_OK(RunSeparately(f, separate));
    PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());
    const ScalarType cache_type = c.fp8 ? ScalarType::kFp8E4M3 : c.dtype;
    // q is rotated in place by both; the fused kernel leaves k's rows as
    // they were, so compare the q columns of each row only.
    const std::vector<uint8_t> q_fused = fused.qkv.Download<uint8_t>(f.qkv.size() * f.elem);
    const std::vector<uint8_t> q_separate = separate.qkv.Download<uint8_t>(f.qkv.size() * f.elem);
    const size_t q_bytes = size_t{1} * c.heads * c.head_dim * f.elem;
    for (int t = 0; t < kFusedTokens; ++t) {
      const size_t at = size_t{1} * t * f.row * f.elem;
      ExpectSameBytes(f, {q_fused.begin() + at, q_fused.begin() + at + q_bytes},
                      {q_separate.begin() + at, q_separate.begin() + at + q_bytes}, 1.0f, c.dtype,
                      "q");
    }
    // The whole caches, untouched (poisoned) slots included.
    ExpectSameBytes(f, fused.key_cache.Download<uint8_t>(f.cache_bytes),
                    separate.key_cache.Download<uint8_t>(f.cache_bytes), kKScale, cache_type,
                    "key cache");
    ExpectSameBytes(f, fused.value_cache.Download<uint8_t>(f.cache_bytes),
                    separate.value_cache.Download<uint8_t>(f.cache_bytes), kVScale, cache_type,
                    "value cache");
    ExpectMatchesHostReference(f, fused);
    // k's activation rows are left as they were (nothing reads them after).
    const std::vector<uint8_t> input = Encode(c.dtype, f.qkv);
    const size_t k_at = q_bytes, k_bytes = size_t{1} * c.kv_heads * c.head_dim * f.elem;
    for (int t = 0; t < kFusedTokens; ++t) {
      const size_t at = size_t{1} * t * f.row * f.elem + k_at;
      EXPECT_EQ(std::memcmp(&q_fused[at], &input[at], k_bytes), 0) << "token " << t;
    }
  }
}

TEST(RopeCacheWriteTest, RejectsBadShapesNullBuffersFp8ScalesAndE5M2) {
  const FusedFixture f(
      {64, 64, 2, 1, 16, ScalarType::kBF16, true, RopeFrequencyScaling::Type::kNone, 0});
  const FusedRun r(f);
  const RopeCacheWriteParams good = FusedParams(f, r);
  std::vector<RopeCacheWriteParams> bad(7, good);
  bad[0].rotary_dim = 63;
  bad[1].rotary_dim = 66;
  bad[2].key_cache = nullptr;
  bad[3].k_scale = 0.0f;
  bad[4].v_scale = std::nanf("");
  bad[5].block_size = 0;
  bad[6].storage = KvCacheStorage::kFp8E5M2;  // Written by LaunchReshapeAndCache only.
  for (const RopeCacheWriteParams& p : bad) {
    EXPECT_EQ(LaunchRopeCacheWrite(p, nullptr), cudaErrorInvalidValue);
  }
  RopeCacheWriteParams empty = good;
  empty.num_tokens = 0;
  EXPECT_EQ(LaunchRopeCacheWrite(empty, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace pagoda::kernels
