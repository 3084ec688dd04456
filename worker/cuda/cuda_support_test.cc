#include "worker/cuda/cuda_support.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace pagoda::worker {
namespace {

using ::testing::HasSubstr;

ModelConfig Config(int head_dim, int heads, int kv_heads) {
  ModelConfig config;
  config.head_dim = head_dim;
  config.num_attention_heads = heads;
  config.num_key_value_heads = kv_heads;
  return config;
}

TEST(CudaSupportTest, ServesHeadSizes64And128Only) {
  EXPECT_TRUE(CheckCudaModelSupported(Config(64, 8, 8)).ok());
  EXPECT_TRUE(CheckCudaModelSupported(Config(128, 32, 8)).ok());
  for (int head_dim : {32, 80, 96, 256}) {
    const absl::Status status = CheckCudaModelSupported(Config(head_dim, 8, 8));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << head_dim;
    EXPECT_EQ(status.message(), "head size " + std::to_string(head_dim) +
                                    " is not supported on CUDA (supported: 64, 128)");
  }
}

TEST(CudaSupportTest, RefusesGqaGroupsTheKernelsLack) {
  EXPECT_TRUE(CheckCudaModelSupported(Config(128, 64, 8)).ok());  // group of 8
  EXPECT_THAT(CheckCudaModelSupported(Config(128, 64, 4)).message(),
              HasSubstr("at most 8 query heads per kv head"));
  EXPECT_FALSE(CheckCudaModelSupported(Config(128, 12, 8)).ok());  // not a multiple
  EXPECT_FALSE(CheckCudaModelSupported(Config(128, 8, 0)).ok());
}

TEST(CudaSupportTest, AutoServesBf16ForF32CheckpointsAndKeepsHalfOnes) {
  EXPECT_EQ(*CudaServingDType(std::nullopt, DType::kF32), DType::kBF16);
  EXPECT_EQ(*CudaServingDType(std::nullopt, DType::kF16), DType::kF16);
  EXPECT_EQ(*CudaServingDType(std::nullopt, DType::kBF16), DType::kBF16);
  EXPECT_EQ(*CudaServingDType(DType::kF16, DType::kBF16), DType::kF16);
  EXPECT_THAT(CudaServingDType(DType::kF32, DType::kF32).status().message(),
              HasSubstr("--dtype float32 is not supported on CUDA"));
  EXPECT_EQ(CheckpointDType("bfloat16"), DType::kBF16);
  EXPECT_EQ(CheckpointDType("float16"), DType::kF16);
  EXPECT_EQ(CheckpointDType("float32"), DType::kF32);
  EXPECT_EQ(CheckpointDType(""), DType::kF32);
}

TEST(CudaSupportTest, KvCacheDTypeMustBeTheServingDTypeOrFp8E4M3) {
  EXPECT_EQ(*CudaKvCacheDType(std::nullopt, DType::kBF16), DType::kBF16);
  EXPECT_EQ(*CudaKvCacheDType(DType::kF16, DType::kF16), DType::kF16);
  EXPECT_FALSE(CudaKvCacheDType(DType::kF32, DType::kBF16).ok());
  // The attention kernels read FP8 E4M3 and E5M2 over either serving dtype.
  for (DType serving : {DType::kBF16, DType::kF16}) {
    EXPECT_EQ(*CudaKvCacheDType(DType::kFp8E4M3, serving), DType::kFp8E4M3);
    EXPECT_EQ(*CudaKvCacheDType(DType::kFp8E5M2, serving), DType::kFp8E5M2);
  }
}

TEST(CudaSupportTest, GraphsArePlannedForTheModelsContextUpToTheRopeTable) {
  ModelConfig config;
  config.max_position_embeddings = 2048;
  EXPECT_EQ(CudaMaxModelLen(config), 2048);
  config.max_position_embeddings = 131072;
  EXPECT_EQ(CudaMaxModelLen(config), kCudaMaxContext);
}

TEST(CudaSupportTest, KvBlocksAreTheUtilisedMemoryLeftAfterThePeak) {
  // 80 GiB at 0.75 = 60 GiB; a 20 GiB peak leaves 40 GiB of 2 MiB blocks.
  const int64_t gib = int64_t{1} << 30;
  EXPECT_EQ(*KvBlocksFromProfile(80 * gib, 0.75, 20 * gib, 2 << 20), 20480);
  EXPECT_EQ(*KvBlocksFromProfile(80 * gib, 0.2, 20 * gib, 2 << 20), 0);  // 16 < 20 GiB
  EXPECT_EQ(*KvBlocksFromProfile(1000, 1.0, 0, 3), 333);
  EXPECT_FALSE(KvBlocksFromProfile(1000, 0.0, 0, 3).ok());
  EXPECT_FALSE(KvBlocksFromProfile(1000, 1.5, 0, 3).ok());
  EXPECT_FALSE(KvBlocksFromProfile(1000, 0.5, 0, 0).ok());
}

}  // namespace
}  // namespace pagoda::worker
