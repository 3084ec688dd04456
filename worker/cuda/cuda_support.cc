#include "worker/cuda/cuda_support.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pagoda::worker {

absl::Status CheckCudaModelSupported(const ModelConfig& config) {
  if (std::find(std::begin(kCudaHeadSizes), std::end(kCudaHeadSizes), config.head_dim) ==
      std::end(kCudaHeadSizes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "head size ", config.head_dim,
        " is not supported on CUDA (supported: ", absl::StrJoin(kCudaHeadSizes, ", "), ")"));
  }
  if (config.num_key_value_heads <= 0 ||
      config.num_attention_heads % config.num_key_value_heads != 0 ||
      config.num_attention_heads / config.num_key_value_heads > kCudaMaxGqaGroup) {
    return absl::InvalidArgumentError(
        absl::StrCat(config.num_attention_heads, " query heads over ", config.num_key_value_heads,
                     " kv heads is not supported on CUDA (at most ", kCudaMaxGqaGroup,
                     " query heads per kv head, dividing evenly)"));
  }
  return absl::OkStatus();
}

int CudaMaxModelLen(const ModelConfig& config) {
  return std::clamp(config.max_position_embeddings, 1, kCudaMaxContext);
}

DType CheckpointDType(std::string_view torch_dtype) {
  return FindFlagDType(absl::AsciiStrToLower(std::string(torch_dtype))).value_or(DType::kF32);
}

absl::StatusOr<DType> CudaServingDType(std::optional<DType> requested, DType checkpoint) {
  if (!requested.has_value()) return checkpoint == DType::kF32 ? DType::kBF16 : checkpoint;
  if (*requested == DType::kF32) {
    return absl::InvalidArgumentError(
        "--dtype float32 is not supported on CUDA (use auto, bfloat16 or float16)");
  }
  return *requested;
}

absl::StatusOr<DType> CudaKvCacheDType(std::optional<DType> requested, DType serving) {
  if (!requested.has_value() || *requested == serving) return serving;
  if (*requested == DType::kFp8E4M3 || *requested == DType::kFp8E5M2) return *requested;
  return absl::InvalidArgumentError(absl::StrCat("--kv-cache-dtype ", DTypeFlagName(*requested),
                                                 " is not supported on CUDA with --dtype ",
                                                 DTypeFlagName(serving), " (use auto)"));
}

absl::StatusOr<int32_t> KvBlocksFromProfile(int64_t total_bytes, double gpu_memory_utilization,
                                            int64_t peak_bytes, int64_t bytes_per_block) {
  if (!(gpu_memory_utilization > 0 && gpu_memory_utilization <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpu_memory_utilization must be in (0, 1], got ", gpu_memory_utilization));
  }
  if (bytes_per_block <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bytes_per_block must be positive, got ", bytes_per_block));
  }
  const double budget = std::floor(static_cast<double>(total_bytes) * gpu_memory_utilization);
  const double left = budget - static_cast<double>(peak_bytes);
  if (left <= 0) return 0;
  const double blocks = std::floor(left / static_cast<double>(bytes_per_block));
  return static_cast<int32_t>(std::min<double>(blocks, std::numeric_limits<int32_t>::max()));
}

}  // namespace pagoda::worker
