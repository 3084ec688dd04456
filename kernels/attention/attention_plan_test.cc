// Host-side planning and validation of the attention kernels. No GPU needed.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "kernels/attention/paged_attention.h"

namespace pagoda::kernels {
namespace {

constexpr int kH200Sms = 132;

TEST(PlanDecodeAttentionTest, LargeBatchDoesNotSplit) {
  // 64 sequences x 8 kv heads = 512 blocks: already ~4 per SM.
  const DecodePlan plan = PlanDecodeAttention(64, 32, 8, 128, 4096, kH200Sms);
  EXPECT_EQ(plan.partition_size, 0);
  EXPECT_EQ(plan.max_num_partitions, 1);
  EXPECT_EQ(plan.workspace_bytes, 0u);
}

TEST(PlanDecodeAttentionTest, SingleLongSequenceSplits) {
  const DecodePlan plan = PlanDecodeAttention(1, 32, 8, 128, 32768, kH200Sms);
  EXPECT_EQ(plan.partition_size, 512);
  EXPECT_EQ(plan.max_num_partitions, 64);
  // f32 partial outputs plus one f32 log-sum-exp per (seq, q head, partition).
  EXPECT_EQ(plan.workspace_bytes, 1u * 32 * 64 * (128 + 1) * sizeof(float));
}

TEST(PlanDecodeAttentionTest, ShortContextNeverSplitsInAuto) {
  const DecodePlan plan = PlanDecodeAttention(1, 32, 8, 128, 512, kH200Sms);
  EXPECT_EQ(plan.partition_size, 0);
}

TEST(PlanDecodeAttentionTest, SplitThresholdFollowsSmCount) {
  // 16 seqs x 8 kv heads = 128 blocks < 2 x 132: split; on a 32-SM part: not.
  EXPECT_GT(PlanDecodeAttention(16, 32, 8, 128, 2048, kH200Sms).partition_size, 0);
  EXPECT_EQ(PlanDecodeAttention(16, 32, 8, 128, 2048, 32).partition_size, 0);
}

TEST(PlanDecodeAttentionTest, ForcedModesAndPartitionRounding) {
  DecodePlanOptions never;
  never.split_k = SplitKMode::kNever;
  EXPECT_EQ(PlanDecodeAttention(1, 8, 8, 64, 100000, kH200Sms, never).partition_size, 0);

  DecodePlanOptions always;
  always.split_k = SplitKMode::kAlways;
  always.partition_size = 200;  // rounded down to a multiple of 64
  const DecodePlan plan = PlanDecodeAttention(3, 8, 8, 64, 1000, kH200Sms, always);
  EXPECT_EQ(plan.partition_size, 192);
  EXPECT_EQ(plan.max_num_partitions, 6);  // ceil(1000 / 192)
  EXPECT_EQ(plan.workspace_bytes, 3u * 8 * 6 * (64 + 1) * sizeof(float));

  always.partition_size = 10;  // never below one kernel step
  EXPECT_EQ(PlanDecodeAttention(1, 8, 8, 64, 100, kH200Sms, always).partition_size, 64);
}

DecodeAttentionParams ValidDecodeParams() {
  alignas(16) static int dummy;
  DecodeAttentionParams p;
  p.dtype = ScalarType::kBF16;
  p.num_seqs = 2;
  p.num_q_heads = 28;
  p.num_kv_heads = 4;  // group of 7 (Qwen2-7B) is served via the 8-wide variant
  p.head_dim = 128;
  p.block_size = 16;
  p.max_blocks_per_seq = 4;
  p.q = p.k_cache = p.v_cache = p.out = &dummy;
  p.block_tables = p.context_lens = &dummy;
  return p;
}

// Prefetching pays only with a grid several waves deep (4+ blocks per SM),
// never on a split plan; forced modes are obeyed.
TEST(PlanDecodeAttentionTest, PrefetchOnlyForDeepGrids) {
  EXPECT_TRUE(PlanDecodeAttention(256, 32, 8, 128, 1024, 132).prefetch);
  EXPECT_FALSE(PlanDecodeAttention(64, 32, 8, 128, 1024, 132).prefetch);
  EXPECT_FALSE(PlanDecodeAttention(1, 32, 8, 128, 32768, 132).prefetch);
  DecodePlanOptions always;
  always.prefetch = PrefetchMode::kAlways;
  EXPECT_TRUE(PlanDecodeAttention(1, 32, 8, 128, 32768, 132, always).prefetch);
  DecodePlanOptions never;
  never.prefetch = PrefetchMode::kNever;
  EXPECT_FALSE(PlanDecodeAttention(256, 32, 8, 128, 1024, 132, never).prefetch);
}

// ... and only on memory fast enough to want the extra loads in flight: an
// H200's, not an H100's (unknown bandwidth plans as the H200 measured).
TEST(PlanDecodeAttentionTest, PrefetchOnlyOnFastMemory) {
  const double h100 = PeakMemoryGbps(2619000, 5120);
  const double h200 = PeakMemoryGbps(3201000, 6144);
  EXPECT_NEAR(h100, 3352.3, 0.1);
  EXPECT_NEAR(h200, 4916.7, 0.1);
  EXPECT_EQ(PeakMemoryGbps(0, 5120), 0);
  EXPECT_EQ(PeakMemoryGbps(2619000, -1), 0);
  DecodePlanOptions options;
  options.peak_memory_gbps = h200;
  EXPECT_TRUE(PlanDecodeAttention(256, 32, 8, 128, 1024, 132, options).prefetch);
  EXPECT_FALSE(PlanDecodeAttention(64, 32, 8, 128, 1024, 132, options).prefetch);
  options.peak_memory_gbps = h100;
  EXPECT_FALSE(PlanDecodeAttention(256, 32, 8, 128, 1024, 132, options).prefetch);
  EXPECT_FALSE(PlanDecodeAttention(256, 32, 8, 128, 4096, 132, options).prefetch);
  options.prefetch = PrefetchMode::kAlways;
  EXPECT_TRUE(PlanDecodeAttention(256, 32, 8, 128, 1024, 132, options).prefetch);
}

TEST(CheckDecodeSupportedTest, AcceptsServedShapes) {
  EXPECT_TRUE(CheckDecodeSupported(ValidDecodeParams()).ok());
  DecodeAttentionParams p = ValidDecodeParams();
  p.dtype = ScalarType::kF16;
  p.head_dim = 64;
  p.block_size = 32;
  EXPECT_TRUE(CheckDecodeSupported(p).ok());
}

// Not ok with cudaErrorInvalidValue, and the message names the offending field.
void ExpectRejected(const KernelStatus& status, const std::string& names) {
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.code, cudaErrorInvalidValue);
  EXPECT_NE(status.message.find(names), std::string::npos) << status.message;
}

// Both FP8 caches (E4M3 and E5M2) with finite positive scales, and neither
// with a zero or NaN one.
TEST(CheckDecodeSupportedTest, AcceptsBothFp8CachesWithGoodScalesOnly) {
  for (KvCacheStorage storage : {KvCacheStorage::kFp8E4M3, KvCacheStorage::kFp8E5M2}) {
    DecodeAttentionParams p = ValidDecodeParams();
    p.kv_storage = storage;
    p.k_scale = 0.37f;
    p.v_scale = 2.5f;
    EXPECT_TRUE(CheckDecodeSupported(p).ok());
    p.v_scale = 0.0f;
    ExpectRejected(CheckDecodeSupported(p), "scales");
    p.v_scale = 1.0f;
    p.k_scale = std::nanf("");
    ExpectRejected(CheckDecodeSupported(p), "scales");
  }
}

TEST(CheckDecodeSupportedTest, RejectsEachUnsupportedField) {
  DecodeAttentionParams p = ValidDecodeParams();
  p.dtype = ScalarType::kF32;
  ExpectRejected(CheckDecodeSupported(p), "dtype f32");
  p = ValidDecodeParams();
  p.head_dim = 80;
  ExpectRejected(CheckDecodeSupported(p), "head_dim 80");
  p = ValidDecodeParams();
  p.block_size = 8;
  ExpectRejected(CheckDecodeSupported(p), "block_size 8");
  p = ValidDecodeParams();
  p.num_q_heads = 30;  // not a multiple of 4 kv heads
  ExpectRejected(CheckDecodeSupported(p), "num_q_heads 30 is not a multiple of num_kv_heads 4");
  p = ValidDecodeParams();
  p.num_q_heads = 64;  // group of 16
  ExpectRejected(CheckDecodeSupported(p), "query heads per kv head 16");
  p = ValidDecodeParams();
  p.num_seqs = 0;
  ExpectRejected(CheckDecodeSupported(p), "num_seqs 0");
  p = ValidDecodeParams();
  p.max_blocks_per_seq = 0;
  ExpectRejected(CheckDecodeSupported(p), "max_blocks_per_seq");
  p = ValidDecodeParams();
  p.out = nullptr;
  ExpectRejected(CheckDecodeSupported(p), "pointer is null");
  p = ValidDecodeParams();
  p.q = reinterpret_cast<const char*>(p.q) + 2;  // one bf16 element off
  ExpectRejected(CheckDecodeSupported(p), "16-byte aligned");
  // q rows through a stride: at least a row, and rows 16-byte aligned.
  p = ValidDecodeParams();
  p.q_token_stride = 28 * 128 - 8;
  ExpectRejected(CheckDecodeSupported(p), "q_token_stride");
  p.q_token_stride = (28 + 2 * 4) * 128 + 4;
  ExpectRejected(CheckDecodeSupported(p), "q_token_stride");
  p.q_token_stride = (28 + 2 * 4) * 128;  // A fused QKV product's rows.
  EXPECT_TRUE(CheckDecodeSupported(p).ok());
  EXPECT_EQ(QueryTokenStride(p), (28 + 2 * 4) * 128);
  p.q_token_stride = 0;
  EXPECT_EQ(QueryTokenStride(p), 28 * 128);
}

TEST(LaunchDecodeAttentionTest, UnsupportedReturnsInvalidValueBeforeTouchingTheDevice) {
  DecodeAttentionParams p = ValidDecodeParams();
  p.head_dim = 96;
  EXPECT_EQ(LaunchDecodeAttention(p, DecodePlan{}, nullptr, nullptr), cudaErrorInvalidValue);
}

TEST(LaunchDecodeAttentionTest, SplitPlanForFewerSequencesIsRejectedBeforeLaunch) {
  // A split plan's workspace is sized for its batch: reusing a batch-1 plan
  // for 2 sequences would write past it, so the launcher refuses (no CUDA call
  // happens first, so this runs without a GPU).
  DecodeAttentionParams p = ValidDecodeParams();  // 2 sequences, 28 q heads
  const DecodePlan plan =
      PlanDecodeAttention(1, p.num_q_heads, p.num_kv_heads, p.head_dim, 32768, kH200Sms);
  ASSERT_GT(plan.partition_size, 0);
  alignas(16) static float workspace[4];
  EXPECT_EQ(LaunchDecodeAttention(p, plan, workspace, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchDecodeAttention(p, plan, nullptr, nullptr), cudaErrorInvalidValue);
}

TEST(CheckPrefillSupportedTest, RequiresQueryBoundAndPointers) {
  alignas(16) static int dummy;
  PrefillAttentionParams p;
  p.dtype = ScalarType::kBF16;
  p.num_seqs = 1;
  p.num_q_heads = 32;
  p.num_kv_heads = 8;
  p.head_dim = 128;
  p.block_size = 16;
  p.max_blocks_per_seq = 2;
  p.max_query_len = 20;
  p.q = p.k_cache = p.v_cache = p.out = &dummy;
  p.block_tables = p.context_lens = p.query_start = &dummy;
  EXPECT_TRUE(CheckPrefillSupported(p).ok());
  EXPECT_TRUE(CheckPrefillSupported(p).message.empty());
  p.max_query_len = 0;
  ExpectRejected(CheckPrefillSupported(p), "max_query_len");
  p.max_query_len = 20;
  p.query_start = nullptr;
  ExpectRejected(CheckPrefillSupported(p), "pointer is null");
  p.query_start = &dummy;
  p.head_dim = 256;
  ExpectRejected(CheckPrefillSupported(p), "head_dim 256");
}

TEST(CheckPrefillSupportedTest, WgmmaKernelNeedsADTypeCacheAndABlockCountNotNegative) {
  alignas(16) static int dummy;
  PrefillAttentionParams p;
  p.dtype = ScalarType::kBF16;
  p.num_seqs = 1;
  p.num_q_heads = 32;
  p.num_kv_heads = 8;
  p.head_dim = 128;
  p.block_size = 16;
  p.max_blocks_per_seq = 2;
  p.max_query_len = 20;
  p.q = p.k_cache = p.v_cache = p.out = &dummy;
  p.block_tables = p.context_lens = p.query_start = &dummy;
  p.kernel = PrefillKernel::kWgmma;
  p.num_cache_blocks = 7;
  EXPECT_TRUE(CheckPrefillSupported(p).ok());
  p.kv_storage = KvCacheStorage::kFp8E4M3;
  ExpectRejected(CheckPrefillSupported(p), "wgmma kernel reads a bf16/f16 cache only");
  EXPECT_FALSE(PrefillKernelRunsOnDevice(PrefillKernel::kWgmma, 0, KvCacheStorage::kFp8E4M3));
  p.kernel = PrefillKernel::kMmaSync;  // mma.sync reads FP8 pages
  EXPECT_TRUE(CheckPrefillSupported(p).ok());
  p.kv_storage = KvCacheStorage::kDType;
  p.num_cache_blocks = -1;
  ExpectRejected(CheckPrefillSupported(p), "num_cache_blocks");
}

TEST(KernelStatusFromCudaTest, KeepsTheCodeAndNamesTheFailure) {
  EXPECT_TRUE(KernelStatusFromCuda(cudaSuccess, "x").ok());
  const KernelStatus status = KernelStatusFromCuda(cudaErrorInvalidValue, "decode launch");
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.code, cudaErrorInvalidValue);
  EXPECT_NE(status.message.find("decode launch"), std::string::npos);
  EXPECT_NE(status.message.find("cudaErrorInvalidValue"), std::string::npos);
}

}  // namespace
}  // namespace pagoda::kernels
