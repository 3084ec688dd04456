// Prefill attention kernel against the float64 CPU reference: causal masks,
// variable-length batches, with and without a cached prefix, GQA, dtypes,
// head sizes and block sizes, over bf16/f16 caches and FP8 E4M3 and E5M2
// ones (the reference fed the codes' exact values times the scales). The
// bf16/f16 sweeps run once per prefill kernel: mma.sync everywhere, wgmma
// (the Hopper kernel) on compute capability 9.0 only (skipped elsewhere).
// Needs a CUDA device; skipped without one.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention/attention_reference.h"
#include "kernels/attention/paged_attention.h"
#include "tests/kernels/attention_test_util.h"

namespace pagoda::kernels {
namespace {

struct PrefillCase {
  ScalarType dtype = ScalarType::kBF16;
  int num_q_heads = 32;
  int num_kv_heads = 8;
  int head_dim = 128;
  int block_size = 16;
  BlockTableKind table_kind = BlockTableKind::kShuffled;
  // (context length, query count) per sequence; query count < context length
  // means a cached prefix of (context length - query count) tokens.
  std::vector<std::pair<int, int>> sequences;
  float query_magnitude = 3.0f;
  int q_row_padding = 0;  // Elements after each token's q row (QueryTokenStride).
  // FP8 E4M3 or E5M2 cache with these scales (attention_test_util.h).
  KvCacheStorage kv_storage = KvCacheStorage::kDType;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  PrefillKernel kernel = PrefillKernel::kMmaSync;

  std::string Name() const {
    std::string name =
        std::string(kernel == PrefillKernel::kWgmma ? "wgmma " : "mma.sync ") +
        std::string(dtype == ScalarType::kBF16 ? "bf16" : "f16") +
        (kv_storage != KvCacheStorage::kDType
             ? std::string(kv_storage == KvCacheStorage::kFp8E5M2 ? " e5m2" : " fp8") +
                   " cache k_scale " + std::to_string(k_scale) + " v_scale " +
                   std::to_string(v_scale)
             : "") +
        " heads " + std::to_string(num_q_heads) + "/" + std::to_string(num_kv_heads) + " d" +
        std::to_string(head_dim) + " bs" + std::to_string(block_size) + " seqs";
    for (const auto& [context, queries] : sequences) {
      // Appended piecewise: GCC 12's -Wrestrict misfires on "x" + std::string&&.
      name.append(" ").append(std::to_string(context)).append(":").append(std::to_string(queries));
    }
    return name;
  }
};

void RunPrefillCase(const PrefillCase& c, uint32_t seed) {
  SCOPED_TRACE(c.Name());
  std::mt19937 rng(seed);
  AttentionProblemSpec spec;
  spec.dtype = c.dtype;
  spec.num_q_heads = c.num_q_heads;
  spec.num_kv_heads = c.num_kv_heads;
  spec.head_dim = c.head_dim;
  spec.block_size = c.block_size;
  spec.table_kind = c.table_kind;
  spec.query_magnitude = c.query_magnitude;
  spec.kv_storage = c.kv_storage;
  spec.k_scale = c.k_scale;
  spec.v_scale = c.v_scale;
  int max_query_len = 0;
  for (const auto& [context, queries] : c.sequences) {
    spec.context_lens.push_back(context);
    spec.query_counts.push_back(queries);
    max_query_len = std::max(max_query_len, queries);
  }
  const AttentionProblem problem = MakeAttentionProblem(spec, rng);

  DeviceAttentionProblem device;
  EXPECT_EQ(UploadAttentionProblem(problem, device), cudaSuccess);

  PrefillAttentionParams params;
  params.dtype = c.dtype;
  params.num_seqs = static_cast<int>(c.sequences.size());
  params.num_q_heads = c.num_q_heads;
  params.num_kv_heads = c.num_kv_heads;
  params.head_dim = c.head_dim;
  params.block_size = c.block_size;
  params.max_blocks_per_seq = problem.max_blocks_per_seq;
  params.max_query_len = max_query_len;
  params.softmax_scale = static_cast<float>(problem.softmax_scale);
  params.kv_storage = c.kv_storage;
  params.k_scale = c.k_scale;
  params.v_scale = c.v_scale;
  params.kernel = c.kernel;
  params.num_cache_blocks = problem.cache.num_blocks;
  params.q = device.q.get();
  DeviceBuffer strided_q;
  if (c.q_row_padding > 0) {
    const size_t row = static_cast<size_t>(c.num_q_heads) * c.head_dim;
    EXPECT_EQ(StridedQueryCopy(device.q, problem.q.size() / row, row, c.q_row_padding, strided_q),
              cudaSuccess);
    params.q = strided_q.get();
    params.q_token_stride = static_cast<int64_t>(row) + c.q_row_padding;
  }
  params.query_start = static_cast<const int32_t*>(device.query_start.get());
  params.k_cache = device.k_cache.get();
  params.v_cache = device.v_cache.get();
  params.block_tables = static_cast<const int32_t*>(device.block_tables.get());
  params.context_lens = static_cast<const int32_t*>(device.context_lens.get());
  params.out = device.out.get();
  EXPECT_TRUE(CheckPrefillSupported(params).ok());
  // Poisoned (all-ones bits: NaN) so that an output never written fails.
  EXPECT_EQ(cudaMemset(device.out.get(), 0xff, problem.q.size() * 2), cudaSuccess);
  EXPECT_EQ(LaunchPrefillAttention(params, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  std::vector<float> out;
  EXPECT_EQ(DownloadOutput(device.out, problem.q.size(), c.dtype, out), cudaSuccess);
  const std::vector<double> ref =
      ReferencePagedAttention(problem.q, c.num_q_heads, problem.cache, problem.block_tables,
                              spec.context_lens, problem.query_start, problem.softmax_scale);
  // The tensor-core kernel rounds the softmax probabilities to the input
  // dtype before P.V, as FlashAttention does: weights off by a relative u
  // (and the normaliser summed from the same rounded weights) move an output
  // by at most 2u times max |V| (V is drawn in [-1, 1]; an FP8 cache's
  // dequantized V stays within it, saturation only shrinking it).
  const double probability_rounding =
      2.0 * (c.dtype == ScalarType::kF16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8));
  const Comparison comparison =
      CompareWithReference(out, ref, c.dtype, /*atol=*/1e-3 + probability_rounding);
  EXPECT_EQ(comparison.non_finite, 0u) << comparison.Describe();
  EXPECT_LE(comparison.max_allowed_violation, 0.0) << comparison.Describe();
  EXPECT_LT(comparison.relative_l2_error, 1e-2) << comparison.Describe();
}

// The bf16/f16-cache sweeps, once per prefill kernel (the test parameter).
class PrefillKernelTest : public testing::TestWithParam<PrefillKernel> {
 protected:
  void SetUp() override {
    int device = 0;
    ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
    if (!PrefillKernelRunsOnDevice(GetParam(), device, KvCacheStorage::kDType)) {
      GTEST_SKIP() << "the wgmma prefill kernel needs compute capability 9.0";
    }
  }
  // A case for this test's kernel.
  PrefillCase Case() const {
    PrefillCase c;
    c.kernel = GetParam();
    return c;
  }
};

INSTANTIATE_TEST_SUITE_P(Kernels, PrefillKernelTest,
                         testing::Values(PrefillKernel::kMmaSync, PrefillKernel::kWgmma),
                         [](const testing::TestParamInfo<PrefillKernel>& info) {
                           return info.param == PrefillKernel::kWgmma ? std::string("Wgmma")
                                                                      : std::string("MmaSync");
                         });

TEST_P(PrefillKernelTest, SweepShapesDtypesBlockSizes) {
  const int head_pairs[][2] = {{40, 40}, {64, 8}, {32, 8}};
  uint32_t seed = 1;
  for (ScalarType dtype : {ScalarType::kBF16, ScalarType::kF16}) {
    for (const auto& heads : head_pairs) {
      for (int head_dim : {64, 128}) {
        for (int block_size : {16, 32}) {
          PrefillCase c = Case();
          c.dtype = dtype;
          c.num_q_heads = heads[0];
          c.num_kv_heads = heads[1];
          c.head_dim = head_dim;
          c.block_size = block_size;
          c.table_kind = seed % 2 ? BlockTableKind::kShuffled : BlockTableKind::kRepeated;
          // No prefix (70:70, 1:1), cached prefix (150:20, 33:5), odd sizes.
          c.sequences = {{70, 70}, {150, 20}, {1, 1}, {33, 5}};
          RunPrefillCase(c, seed++);
        }
      }
    }
  }
}

// q read from a fused QKV product's rows (k and v heads poisoned between
// them), with and without a cached prefix, GQA 4 and 1.
TEST_P(PrefillKernelTest, QueryRowsThroughAStride) {
  uint32_t seed = 400;
  for (auto [q_heads, kv_heads] : {std::pair{32, 8}, std::pair{8, 8}}) {
    for (int head_dim : {64, 128}) {
      PrefillCase c = Case();
      c.num_q_heads = q_heads;
      c.num_kv_heads = kv_heads;
      c.head_dim = head_dim;
      c.sequences = {{77, 77}, {300, 45}, {17, 1}};
      c.q_row_padding = 2 * kv_heads * head_dim;
      RunPrefillCase(c, seed++);
    }
  }
}

TEST_P(PrefillKernelTest, GroupsThatSplitAQueryAcrossTiles) {
  // A tile is 64 (query, head) rows: with groups of 7 or 3 a query's heads
  // straddle two tiles, and the tile's key range ends mid-query.
  const int head_pairs[][2] = {{28, 4}, {12, 4}};
  uint32_t seed = 20;
  for (const auto& heads : head_pairs) {
    PrefillCase c = Case();
    c.num_q_heads = heads[0];
    c.num_kv_heads = heads[1];
    c.head_dim = seed % 2 == 0 ? 128 : 64;
    c.sequences = {{70, 70}, {150, 20}, {1, 1}, {33, 5}};
    RunPrefillCase(c, seed++);
  }
}

TEST_P(PrefillKernelTest, NoPrefixLongerPrompts) {
  PrefillCase c = Case();
  c.sequences = {{257, 257}, {64, 64}, {100, 100}};
  RunPrefillCase(c, 10);
}

TEST_P(PrefillKernelTest, CachedPrefixChunks) {
  PrefillCase c = Case();
  c.table_kind = BlockTableKind::kRepeated;
  // A long cached prefix with a chunk of new queries, and single-query tails.
  c.sequences = {{700, 130}, {48, 1}, {513, 17}};
  RunPrefillCase(c, 11);
}

TEST_P(PrefillKernelTest, PeakedSoftmaxIsStable) {
  PrefillCase c = Case();
  c.query_magnitude = 40.0f;
  c.num_q_heads = 40;
  c.num_kv_heads = 40;
  c.sequences = {{90, 90}, {200, 30}};
  RunPrefillCase(c, 12);
}

// FP8 scales: none, arbitrary ones, and a k_scale so small that K saturates
// at +-448 codes (the reference reads the saturated values too).
struct Fp8Scales {
  float k, v;
};
constexpr Fp8Scales kFp8ScaleSweep[] = {{1.0f, 1.0f}, {0.37f, 2.5f}, {1.0f / 1024, 1.0f / 64}};

TEST(PrefillAttentionTest, Fp8CacheSweepShapesDtypesBlockSizes) {
  const int head_pairs[][2] = {{40, 40}, {64, 8}, {32, 8}};
  uint32_t seed = 800;
  for (ScalarType dtype : {ScalarType::kBF16, ScalarType::kF16}) {
    for (const auto& heads : head_pairs) {
      for (int head_dim : {64, 128}) {
        for (int block_size : {16, 32}) {
          PrefillCase c;
          c.kv_storage = KvCacheStorage::kFp8E4M3;
          c.k_scale = kFp8ScaleSweep[seed % 3].k;
          c.v_scale = kFp8ScaleSweep[seed % 3].v;
          c.dtype = dtype;
          c.num_q_heads = heads[0];
          c.num_kv_heads = heads[1];
          c.head_dim = head_dim;
          c.block_size = block_size;
          c.table_kind = seed % 2 ? BlockTableKind::kShuffled : BlockTableKind::kRepeated;
          c.sequences = {{70, 70}, {150, 20}, {1, 1}, {33, 5}};
          RunPrefillCase(c, seed++);
        }
      }
    }
  }
}

// An FP8 E5M2 cache (--kv-cache-dtype fp8_e5m2): every dtype, head size and
// block size, the scales of the E4M3 sweep.
TEST(PrefillAttentionTest, Fp8E5M2CacheSweepShapesDtypesBlockSizes) {
  uint32_t seed = 1800;
  for (ScalarType dtype : {ScalarType::kBF16, ScalarType::kF16}) {
    for (int head_dim : {64, 128}) {
      for (int block_size : {16, 32}) {
        PrefillCase c;
        c.kv_storage = KvCacheStorage::kFp8E5M2;
        c.k_scale = kFp8ScaleSweep[seed % 3].k;
        c.v_scale = kFp8ScaleSweep[seed % 3].v;
        c.dtype = dtype;
        c.num_q_heads = seed % 2 == 0 ? 64 : 40;
        c.num_kv_heads = seed % 2 == 0 ? 8 : 40;
        c.head_dim = head_dim;
        c.block_size = block_size;
        c.table_kind = seed % 2 ? BlockTableKind::kShuffled : BlockTableKind::kRepeated;
        c.sequences = {{70, 70}, {150, 20}, {1, 1}, {33, 5}};
        RunPrefillCase(c, seed++);
      }
    }
  }
}

// Every scale pair over a long cached prefix, groups that split a query
// across tiles, and q through a fused QKV stride.
TEST(PrefillAttentionTest, Fp8CachePrefixGroupsAndStrides) {
  uint32_t seed = 900;
  for (const Fp8Scales& scales : kFp8ScaleSweep) {
    for (const auto& heads : {std::pair{28, 4}, std::pair{12, 4}}) {
      PrefillCase c;
      c.kv_storage = KvCacheStorage::kFp8E4M3;
      c.k_scale = scales.k;
      c.v_scale = scales.v;
      c.num_q_heads = heads.first;
      c.num_kv_heads = heads.second;
      c.head_dim = seed % 2 == 0 ? 128 : 64;
      c.table_kind = BlockTableKind::kRepeated;
      c.sequences = {{700, 130}, {48, 1}, {257, 257}, {33, 5}};
      c.q_row_padding = 2 * c.num_kv_heads * c.head_dim;
      RunPrefillCase(c, seed++);
    }
  }
}

// Longer than one 128-key tile per row block and across pages: several
// pipeline rounds (the ring wraps), a long cached prefix, keys ending inside
// a tile and a page, every query of a group in one 128-row block or split.
TEST_P(PrefillKernelTest, LongContextsWrapThePipeline) {
  uint32_t seed = 30;
  for (int group : {1, 4, 3}) {
    PrefillCase c = Case();
    c.num_kv_heads = 2;
    c.num_q_heads = 2 * group;
    c.block_size = seed % 2 == 0 ? 16 : 32;
    c.sequences = {{600, 600}, {1537, 300}, {129, 129}, {640, 128}};
    RunPrefillCase(c, seed++);
  }
}

// The launcher refuses the wgmma kernel over an FP8 cache before touching
// the device (the checks themselves: attention_plan_test).
TEST(PrefillAttentionTest, WgmmaKernelOverAnFp8CacheIsRejectedWithoutLaunch) {
  PrefillAttentionParams params;
  params.num_seqs = 1;
  params.num_q_heads = 8;
  params.num_kv_heads = 8;
  params.head_dim = 128;
  params.block_size = 16;
  params.max_blocks_per_seq = 1;
  params.max_query_len = 1;
  params.kv_storage = KvCacheStorage::kFp8E4M3;
  params.kernel = PrefillKernel::kWgmma;
  // Aligned host memory: the checks must refuse the FP8 cache, not the
  // pointers, and nothing is launched.
  alignas(16) int32_t dummy[4] = {};
  params.q = params.k_cache = params.v_cache = params.out = dummy;
  params.query_start = params.block_tables = params.context_lens = dummy;
  EXPECT_EQ(LaunchPrefillAttention(params, nullptr), cudaErrorInvalidValue);
}

TEST(PrefillAttentionTest, UnsupportedShapeIsRejectedWithoutLaunch) {
  PrefillAttentionParams params;
  params.dtype = ScalarType::kF32;
  params.num_seqs = 1;
  params.num_q_heads = 8;
  params.num_kv_heads = 8;
  params.head_dim = 128;
  params.block_size = 16;
  params.max_blocks_per_seq = 1;
  params.max_query_len = 1;
  EXPECT_EQ(LaunchPrefillAttention(params, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace pagoda::kernels
