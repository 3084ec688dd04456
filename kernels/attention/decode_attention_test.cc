// Decode attention kernels against the float64 CPU reference, over the sweep of
// REFERENCE.md "Kernel test sweeps" (served head sizes and block sizes only),
// over bf16/f16 caches and FP8 E4M3 and E5M2 ones (the reference fed the
// codes' exact values times the scales).
// Needs a CUDA device; skipped (reported as skipped by ctest) without one.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention/attention_reference.h"
#include "kernels/attention/paged_attention.h"
#include "tests/kernels/attention_test_util.h"

namespace pagoda::kernels {
namespace {

struct DecodeCase {
  ScalarType dtype = ScalarType::kBF16;
  int num_q_heads = 32;
  int num_kv_heads = 8;
  int head_dim = 128;
  int block_size = 16;
  BlockTableKind table_kind = BlockTableKind::kShuffled;
  SplitKMode split_k = SplitKMode::kAuto;
  int partition_size = 512;
  PrefetchMode prefetch = PrefetchMode::kAlways;
  int batch = 4;
  int max_context = 600;
  float query_magnitude = 3.0f;
  int q_row_padding = 0;  // Elements after each token's q row (QueryTokenStride).
  // Explicit per-sequence lengths (batch entries, each <= max_context); empty:
  // RandomContextLens.
  std::vector<int32_t> context_lens;
  // FP8 E4M3 or E5M2 cache with these scales (attention_test_util.h).
  KvCacheStorage kv_storage = KvCacheStorage::kDType;
  float k_scale = 1.0f;
  float v_scale = 1.0f;

  std::string Name() const {
    return std::string(dtype == ScalarType::kBF16 ? "bf16" : "f16") +
           (kv_storage != KvCacheStorage::kDType
                ? std::string(kv_storage == KvCacheStorage::kFp8E5M2 ? " e5m2" : " fp8") +
                      " cache k_scale " + std::to_string(k_scale) + " v_scale " +
                      std::to_string(v_scale)
                : "") +
           " heads " + std::to_string(num_q_heads) + "/" + std::to_string(num_kv_heads) + " d" +
           std::to_string(head_dim) + " bs" + std::to_string(block_size) +
           (table_kind == BlockTableKind::kShuffled ? " shuffled" : " repeated") + " split" +
           std::to_string(static_cast<int>(split_k)) + "/" + std::to_string(partition_size) +
           (prefetch == PrefetchMode::kNever ? " no-prefetch" : "") + " batch " +
           std::to_string(batch) + " max_ctx " + std::to_string(max_context);
  }
};

int NumSms() {
  int count = 0;
  cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, 0);
  return count;
}

// Context lengths in [1, max]: the first is 1 (when there are two or more),
// the last is max, the rest random (so mostly not block-size multiples).
std::vector<int32_t> RandomContextLens(int batch, int max_context, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> length(1, max_context);
  std::vector<int32_t> lens(batch);
  for (int32_t& len : lens) len = length(rng);
  if (batch >= 2) lens.front() = 1;
  lens.back() = max_context;
  return lens;
}

// Runs one case; returns the plan used so callers can check the split choice.
DecodePlan RunDecodeCase(const DecodeCase& c, uint32_t seed) {
  SCOPED_TRACE(c.Name());
  std::mt19937 rng(seed);
  AttentionProblemSpec spec;
  spec.dtype = c.dtype;
  spec.num_q_heads = c.num_q_heads;
  spec.num_kv_heads = c.num_kv_heads;
  spec.head_dim = c.head_dim;
  spec.block_size = c.block_size;
  spec.table_kind = c.table_kind;
  spec.context_lens =
      c.context_lens.empty() ? RandomContextLens(c.batch, c.max_context, rng) : c.context_lens;
  spec.query_counts.assign(c.batch, 1);
  spec.query_magnitude = c.query_magnitude;
  spec.kv_storage = c.kv_storage;
  spec.k_scale = c.k_scale;
  spec.v_scale = c.v_scale;
  const AttentionProblem problem = MakeAttentionProblem(spec, rng);

  DeviceAttentionProblem device;
  EXPECT_EQ(UploadAttentionProblem(problem, device), cudaSuccess);

  DecodeAttentionParams params;
  params.dtype = c.dtype;
  params.num_seqs = c.batch;
  params.num_q_heads = c.num_q_heads;
  params.num_kv_heads = c.num_kv_heads;
  params.head_dim = c.head_dim;
  params.block_size = c.block_size;
  params.max_blocks_per_seq = problem.max_blocks_per_seq;
  params.softmax_scale = static_cast<float>(problem.softmax_scale);
  params.kv_storage = c.kv_storage;
  params.k_scale = c.k_scale;
  params.v_scale = c.v_scale;
  params.q = device.q.get();
  DeviceBuffer strided_q;
  if (c.q_row_padding > 0) {
    const size_t row = static_cast<size_t>(c.num_q_heads) * c.head_dim;
    EXPECT_EQ(StridedQueryCopy(device.q, c.batch, row, c.q_row_padding, strided_q), cudaSuccess);
    params.q = strided_q.get();
    params.q_token_stride = static_cast<int64_t>(row) + c.q_row_padding;
  }
  params.k_cache = device.k_cache.get();
  params.v_cache = device.v_cache.get();
  params.block_tables = static_cast<const int32_t*>(device.block_tables.get());
  params.context_lens = static_cast<const int32_t*>(device.context_lens.get());
  params.out = device.out.get();
  EXPECT_TRUE(CheckDecodeSupported(params).ok());

  DecodePlanOptions options;
  options.split_k = c.split_k;
  options.partition_size = c.partition_size;
  options.prefetch = c.prefetch;
  const DecodePlan plan = PlanDecodeAttention(c.batch, c.num_q_heads, c.num_kv_heads, c.head_dim,
                                              c.max_context, NumSms(), options);
  DeviceBuffer workspace(plan.workspace_bytes);
  // Poison the workspace too: a partial result the merge reads but nobody wrote
  // must not pass.
  if (plan.workspace_bytes > 0) {
    EXPECT_EQ(cudaMemset(workspace.get(), 0xFF, plan.workspace_bytes), cudaSuccess);
  }
  EXPECT_EQ(LaunchDecodeAttention(params, plan, workspace.get(), nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  std::vector<float> out;
  EXPECT_EQ(DownloadOutput(device.out, problem.q.size(), c.dtype, out), cudaSuccess);
  const std::vector<double> ref =
      ReferenceDecodeAttention(problem.q, c.num_q_heads, problem.cache, problem.block_tables,
                               spec.context_lens, problem.softmax_scale);
  const Comparison comparison = CompareWithReference(out, ref, c.dtype);
  EXPECT_EQ(comparison.non_finite, 0u) << comparison.Describe();
  EXPECT_LE(comparison.max_allowed_violation, 0.0) << comparison.Describe();
  EXPECT_LT(comparison.relative_l2_error, 1e-2) << comparison.Describe();
  return plan;
}

TEST(DecodeAttentionTest, SweepShapesDtypesBlockSizesAndSplit) {
  const int head_pairs[][2] = {{40, 40}, {64, 8}, {32, 8}};  // GQA ratios 1, 8, 4
  uint32_t seed = 1;
  for (ScalarType dtype : {ScalarType::kBF16, ScalarType::kF16}) {
    for (const auto& heads : head_pairs) {
      for (int head_dim : {64, 128}) {
        for (int block_size : {16, 32}) {
          for (SplitKMode split : {SplitKMode::kNever, SplitKMode::kAlways}) {
            DecodeCase c;
            // Both kernel variants, every shape family.
            c.prefetch = seed % 2 == 0 ? PrefetchMode::kAlways : PrefetchMode::kNever;
            c.dtype = dtype;
            c.num_q_heads = heads[0];
            c.num_kv_heads = heads[1];
            c.head_dim = head_dim;
            c.block_size = block_size;
            c.split_k = split;
            c.table_kind =
                split == SplitKMode::kNever ? BlockTableKind::kShuffled : BlockTableKind::kRepeated;
            c.batch = 2 + static_cast<int>(seed % 3);  // keeps the 40-kv-head cache small
            c.max_context = 1100 + static_cast<int>(seed * 37 % 100);  // 3 partitions
            const DecodePlan plan = RunDecodeCase(c, seed++);
            EXPECT_EQ(plan.partition_size > 0, split == SplitKMode::kAlways);
          }
        }
      }
    }
  }
}

// q read from a fused QKV product's rows: each token's q heads, then its k
// and v heads (poisoned here), split and unsplit, both kernel variants.
TEST(DecodeAttentionTest, QueryRowsThroughAStride) {
  uint32_t seed = 300;
  for (SplitKMode split : {SplitKMode::kNever, SplitKMode::kAlways}) {
    for (PrefetchMode prefetch : {PrefetchMode::kNever, PrefetchMode::kAlways}) {
      DecodeCase c;
      c.split_k = split;
      c.prefetch = prefetch;
      c.batch = 5;
      c.max_context = 1100;
      c.q_row_padding = 2 * c.num_kv_heads * c.head_dim;
      RunDecodeCase(c, seed++);
    }
  }
}

TEST(DecodeAttentionTest, GroupsSmallerThanTheCompiledVariant) {
  // Group 7 (Qwen2-7B 28/4) runs the 8-wide variant, groups 3 and 2 the 4-wide
  // one: the unused group slots must not leak into q-head indexing.
  const int head_pairs[][2] = {{28, 4}, {12, 4}, {4, 2}};
  uint32_t seed = 600;
  for (const auto& heads : head_pairs) {
    for (SplitKMode split : {SplitKMode::kNever, SplitKMode::kAlways}) {
      DecodeCase c;
      c.num_q_heads = heads[0];
      c.num_kv_heads = heads[1];
      c.head_dim = seed % 2 == 0 ? 128 : 64;
      c.split_k = split;
      c.batch = 3;
      c.max_context = 700;
      RunDecodeCase(c, seed++);
    }
  }
}

TEST(DecodeAttentionTest, SmallPartitionsManyMerges) {
  for (int partition_size : {64, 128, 192}) {
    DecodeCase c;
    c.split_k = SplitKMode::kAlways;
    c.partition_size = partition_size;
    c.batch = 6;
    c.max_context = 1000;
    const DecodePlan plan = RunDecodeCase(c, 100 + partition_size);
    EXPECT_EQ(plan.max_num_partitions, (1000 + partition_size - 1) / partition_size);
  }
}

TEST(DecodeAttentionTest, ContextsEndingOnBlockAndPartitionBoundaries) {
  // Random lengths rarely end exactly on a partition edge (and only by chance
  // on a cache-block edge), where an off-by-one partition count (floor + 1
  // instead of ceil: for 128 the merge would read partition 1's poisoned,
  // unwritten row) or a last-block indexing slip would show. 128 and 256 end
  // exactly on partitions of 128, 129 one token past; 16, 32 and 127 end on or
  // just before cache-block edges.
  uint32_t seed = 700;
  for (int block_size : {16, 32}) {
    for (SplitKMode split : {SplitKMode::kNever, SplitKMode::kAlways}) {
      DecodeCase c;
      c.block_size = block_size;
      c.split_k = split;
      c.partition_size = 128;
      c.context_lens = {16, 32, 127, 128, 129, 256};
      c.batch = static_cast<int>(c.context_lens.size());
      c.max_context = 256;
      const DecodePlan plan = RunDecodeCase(c, seed++);
      if (split == SplitKMode::kAlways) {
        EXPECT_EQ(plan.max_num_partitions, 2);
      }
    }
  }
}

TEST(DecodeAttentionTest, LargeBatchesSampled) {
  uint32_t seed = 200;
  for (int batch : {1, 17, 64, 256}) {
    DecodeCase c;
    c.batch = batch;
    c.max_context = batch >= 64 ? 257 : 700;
    c.table_kind = batch % 2 == 0 ? BlockTableKind::kRepeated : BlockTableKind::kShuffled;
    RunDecodeCase(c, seed++);
  }
}

TEST(DecodeAttentionTest, AutoPlanSplitsLongContextSmallBatch) {
  DecodeCase c;
  c.batch = 1;
  c.max_context = 5000;
  const DecodePlan plan = RunDecodeCase(c, 300);
  EXPECT_GT(plan.partition_size, 0);
  EXPECT_EQ(plan.max_num_partitions, (5000 + 511) / 512);
}

TEST(DecodeAttentionTest, AllContextsOfLengthOne) {
  for (SplitKMode split : {SplitKMode::kNever, SplitKMode::kAlways}) {
    DecodeCase c;
    c.batch = 5;
    c.max_context = 1;  // RandomContextLens then gives all ones
    c.split_k = split;
    RunDecodeCase(c, 400);
  }
}

TEST(DecodeAttentionTest, PeakedSoftmaxIsStable) {
  // Large queries make scores span hundreds: exercises the running-max rescale
  // (exp of unshifted scores would overflow f32).
  for (SplitKMode split : {SplitKMode::kNever, SplitKMode::kAlways}) {
    DecodeCase c;
    c.query_magnitude = 40.0f;
    c.split_k = split;
    c.max_context = 900;
    c.num_q_heads = 64;
    c.num_kv_heads = 8;
    RunDecodeCase(c, 500 + static_cast<int>(split));
  }
}

// FP8 scales: none, arbitrary ones, and a k_scale so small that K saturates
// at +-448 codes (the reference reads the saturated values too).
struct Fp8Scales {
  float k, v;
};
constexpr Fp8Scales kFp8ScaleSweep[] = {{1.0f, 1.0f}, {0.37f, 2.5f}, {1.0f / 1024, 1.0f / 64}};

TEST(DecodeAttentionTest, Fp8CacheSweepShapesDtypesBlockSizesAndSplit) {
  const int head_pairs[][2] = {{40, 40}, {64, 8}, {32, 8}};
  uint32_t seed = 800;
  for (ScalarType dtype : {ScalarType::kBF16, ScalarType::kF16}) {
    for (const auto& heads : head_pairs) {
      for (int head_dim : {64, 128}) {
        for (int block_size : {16, 32}) {
          for (SplitKMode split : {SplitKMode::kNever, SplitKMode::kAlways}) {
            DecodeCase c;
            c.kv_storage = KvCacheStorage::kFp8E4M3;
            c.k_scale = kFp8ScaleSweep[seed % 3].k;
            c.v_scale = kFp8ScaleSweep[seed % 3].v;
            c.prefetch = seed % 2 == 0 ? PrefetchMode::kAlways : PrefetchMode::kNever;
            c.dtype = dtype;
            c.num_q_heads = heads[0];
            c.num_kv_heads = heads[1];
            c.head_dim = head_dim;
            c.block_size = block_size;
            c.split_k = split;
            c.table_kind =
                split == SplitKMode::kNever ? BlockTableKind::kShuffled : BlockTableKind::kRepeated;
            c.batch = 2 + static_cast<int>(seed % 3);
            c.max_context = 1100 + static_cast<int>(seed * 37 % 100);
            RunDecodeCase(c, seed++);
          }
        }
      }
    }
  }
}

// An FP8 E5M2 cache (--kv-cache-dtype fp8_e5m2): every dtype, head size,
// block size and split mode, the scales of the E4M3 sweep.
TEST(DecodeAttentionTest, Fp8E5M2CacheSweepShapesDtypesBlockSizesAndSplit) {
  uint32_t seed = 1800;
  for (ScalarType dtype : {ScalarType::kBF16, ScalarType::kF16}) {
    for (int head_dim : {64, 128}) {
      for (int block_size : {16, 32}) {
        for (SplitKMode split : {SplitKMode::kNever, SplitKMode::kAlways}) {
          DecodeCase c;
          c.kv_storage = KvCacheStorage::kFp8E5M2;
          c.k_scale = kFp8ScaleSweep[seed % 3].k;
          c.v_scale = kFp8ScaleSweep[seed % 3].v;
          c.prefetch = seed % 2 == 0 ? PrefetchMode::kAlways : PrefetchMode::kNever;
          c.dtype = dtype;
          c.num_q_heads = seed % 2 == 0 ? 64 : 40;
          c.num_kv_heads = seed % 2 == 0 ? 8 : 40;
          c.head_dim = head_dim;
          c.block_size = block_size;
          c.split_k = split;
          c.table_kind =
              split == SplitKMode::kNever ? BlockTableKind::kShuffled : BlockTableKind::kRepeated;
          c.batch = 2 + static_cast<int>(seed % 3);
          c.max_context = 1100 + static_cast<int>(seed * 37 % 100);
          RunDecodeCase(c, seed++);
        }
      }
    }
  }
}

// Every scale pair with contexts ending on and just past block and partition
// edges, group sizes 7 and 3, and q through a fused QKV stride.
TEST(DecodeAttentionTest, Fp8CacheEdgesGroupsAndStrides) {
  uint32_t seed = 900;
  for (const Fp8Scales& scales : kFp8ScaleSweep) {
    for (const auto& heads : {std::pair{28, 4}, std::pair{12, 4}}) {
      DecodeCase c;
      c.kv_storage = KvCacheStorage::kFp8E4M3;
      c.k_scale = scales.k;
      c.v_scale = scales.v;
      c.num_q_heads = heads.first;
      c.num_kv_heads = heads.second;
      c.head_dim = seed % 2 == 0 ? 128 : 64;
      c.split_k = seed % 2 == 0 ? SplitKMode::kAlways : SplitKMode::kNever;
      c.partition_size = 128;
      c.context_lens = {1, 16, 32, 127, 128, 129, 256};
      c.batch = static_cast<int>(c.context_lens.size());
      c.max_context = 256;
      c.q_row_padding = 2 * c.num_kv_heads * c.head_dim;
      RunDecodeCase(c, seed++);
    }
  }
}

TEST(DecodeAttentionTest, Fp8CacheWithBadScalesIsRejected) {
  DecodeAttentionParams params;
  params.dtype = ScalarType::kBF16;
  params.num_seqs = 1;
  params.num_q_heads = 8;
  params.num_kv_heads = 8;
  params.head_dim = 128;
  params.block_size = 16;
  params.max_blocks_per_seq = 1;
  params.kv_storage = KvCacheStorage::kFp8E4M3;
  params.k_scale = 0.0f;
  EXPECT_FALSE(CheckDecodeSupported(params).ok());
  EXPECT_EQ(LaunchDecodeAttention(params, DecodePlan{}, nullptr, nullptr), cudaErrorInvalidValue);
}

TEST(DecodeAttentionTest, UnsupportedShapeIsRejectedWithoutLaunch) {
  DecodeAttentionParams params;
  params.dtype = ScalarType::kBF16;
  params.num_seqs = 1;
  params.num_q_heads = 8;
  params.num_kv_heads = 8;
  params.head_dim = 80;
  params.block_size = 16;
  params.max_blocks_per_seq = 1;
  EXPECT_EQ(LaunchDecodeAttention(params, DecodePlan{}, nullptr, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace pagoda::kernels
