// Host-side validation and work planning for the paged attention kernels.
// No CUDA calls, so this runs (and is tested) without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/alignment.h"
#include "kernels/attention/paged_attention.h"

namespace pagoda::kernels {
namespace {

constexpr int kMaxGroupSize = 8;

std::string Str(int value) { return std::to_string(value); }

KernelStatus CheckCommonShape(ScalarType dtype, int num_q_heads, int num_kv_heads, int head_dim,
                              int block_size, int max_blocks_per_seq, int num_seqs) {
  if (dtype != ScalarType::kBF16 && dtype != ScalarType::kF16) {
    return InvalidKernelArgument(std::string("attention: unsupported dtype ") +
                                 ScalarTypeName(dtype) + " (bf16, f16 only)");
  }
  if (head_dim != 64 && head_dim != 128) {
    return InvalidKernelArgument("attention: unsupported head_dim " + Str(head_dim) +
                                 " (64, 128 only)");
  }
  if (block_size != 16 && block_size != 32) {
    return InvalidKernelArgument("attention: unsupported block_size " + Str(block_size) +
                                 " (16, 32 only)");
  }
  if (num_q_heads <= 0 || num_kv_heads <= 0 || num_q_heads % num_kv_heads != 0) {
    return InvalidKernelArgument("attention: num_q_heads " + Str(num_q_heads) +
                                 " is not a multiple of num_kv_heads " + Str(num_kv_heads));
  }
  if (num_q_heads / num_kv_heads > kMaxGroupSize) {
    return InvalidKernelArgument("attention: query heads per kv head " +
                                 Str(num_q_heads / num_kv_heads) + " > " + Str(kMaxGroupSize));
  }
  if (num_seqs <= 0 || num_seqs > 65535) {
    return InvalidKernelArgument("attention: num_seqs " + Str(num_seqs) + " outside [1, 65535]");
  }
  if (max_blocks_per_seq <= 0) {
    return InvalidKernelArgument("attention: max_blocks_per_seq must be positive");
  }
  return OkKernelStatus();
}

// The cache's storage and, for FP8, its scales: finite and positive.
KernelStatus CheckKvStorage(KvCacheStorage storage, float k_scale, float v_scale,
                            const char* kernel) {
  if (storage == KvCacheStorage::kDType) return OkKernelStatus();
  if (storage != KvCacheStorage::kFp8E4M3 && storage != KvCacheStorage::kFp8E5M2) {
    return InvalidKernelArgument(std::string(kernel) + ": unknown KV cache storage");
  }
  if (!(std::isfinite(k_scale) && k_scale > 0.0f && std::isfinite(v_scale) && v_scale > 0.0f)) {
    return InvalidKernelArgument(std::string(kernel) + ": FP8 KV cache scales k " +
                                 std::to_string(k_scale) + ", v " + std::to_string(v_scale) +
                                 " are not finite and positive");
  }
  return OkKernelStatus();
}

}  // namespace

// QueryTokenStride's REQUIRES, for the decode or prefill params `p`.
template <typename Params>
KernelStatus CheckQueryStride(const Params& p, const char* kernel) {
  const int64_t stride = QueryTokenStride(p);
  if (stride < static_cast<int64_t>(p.num_q_heads) * p.head_dim || stride % 8 != 0) {
    return InvalidKernelArgument(std::string(kernel) + ": q_token_stride " +
                                 std::to_string(stride) +
                                 " is below num_q_heads * head_dim or not a multiple of 8");
  }
  return OkKernelStatus();
}

KernelStatus CheckDecodeSupported(const DecodeAttentionParams& p) {
  KernelStatus status = CheckCommonShape(p.dtype, p.num_q_heads, p.num_kv_heads, p.head_dim,
                                         p.block_size, p.max_blocks_per_seq, p.num_seqs);
  if (!status.ok()) return status;
  if (p.q == nullptr || p.k_cache == nullptr || p.v_cache == nullptr || p.block_tables == nullptr ||
      p.context_lens == nullptr || p.out == nullptr) {
    return InvalidKernelArgument("decode attention: a tensor pointer is null");
  }
  if (!Aligned16(p.q) || !Aligned16(p.k_cache) || !Aligned16(p.v_cache)) {
    return InvalidKernelArgument("decode attention: q, k_cache, v_cache must be 16-byte aligned");
  }
  status = CheckKvStorage(p.kv_storage, p.k_scale, p.v_scale, "decode attention");
  if (!status.ok()) return status;
  return CheckQueryStride(p, "decode attention");
}

KernelStatus CheckPrefillSupported(const PrefillAttentionParams& p) {
  KernelStatus status = CheckCommonShape(p.dtype, p.num_q_heads, p.num_kv_heads, p.head_dim,
                                         p.block_size, p.max_blocks_per_seq, p.num_seqs);
  if (!status.ok()) return status;
  if (p.max_query_len <= 0) {
    return InvalidKernelArgument("prefill attention: max_query_len must be positive");
  }
  if (p.q == nullptr || p.query_start == nullptr || p.k_cache == nullptr || p.v_cache == nullptr ||
      p.block_tables == nullptr || p.context_lens == nullptr || p.out == nullptr) {
    return InvalidKernelArgument("prefill attention: a tensor pointer is null");
  }
  if (!Aligned16(p.q) || !Aligned16(p.k_cache) || !Aligned16(p.v_cache)) {
    return InvalidKernelArgument("prefill attention: q, k_cache, v_cache must be 16-byte aligned");
  }
  status = CheckKvStorage(p.kv_storage, p.k_scale, p.v_scale, "prefill attention");
  if (!status.ok()) return status;
  if (p.kernel == PrefillKernel::kWgmma && p.kv_storage != KvCacheStorage::kDType) {
    return InvalidKernelArgument("prefill attention: the wgmma kernel reads a bf16/f16 cache only");
  }
  if (p.num_cache_blocks < 0) {
    return InvalidKernelArgument("prefill attention: num_cache_blocks must not be negative");
  }
  return CheckQueryStride(p, "prefill attention");
}

bool PrefillKernelRunsOnDevice(PrefillKernel kernel, int device, KvCacheStorage kv_storage) {
  if (kernel == PrefillKernel::kMmaSync) return true;
  int major = 0;
  int minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    return false;
  }
  return major == 9 && minor == 0 && kv_storage == KvCacheStorage::kDType;
}

namespace {

// On the H200 (4.9 TB/s peak), prefetching won 2-5 points of copy bandwidth
// once the grid held >= 4 blocks per SM (batch 256 x 8 kv heads) and lost 2-7
// below that (batch 64 x 8 kv heads, and split long contexts). On the H100
// (3.35 TB/s) it lost everywhere: 3-5 points at 4+ blocks per SM, 15-21
// below; four blocks per SM without it already keep its memory busy.
constexpr double kPrefetchMinPeakGbps = 4000;

bool ChoosePrefetch(PrefetchMode mode, bool split, long long unsplit_blocks, int num_sms,
                    double peak_memory_gbps) {
  switch (mode) {
    case PrefetchMode::kNever:
      return false;
    case PrefetchMode::kAlways:
      return true;
    case PrefetchMode::kAuto:
      break;
  }
  const bool fast_memory = peak_memory_gbps == 0 || peak_memory_gbps >= kPrefetchMinPeakGbps;
  return !split && fast_memory && unsplit_blocks >= 4LL * std::max(num_sms, 1);
}

}  // namespace

double PeakMemoryGbps(int memory_clock_khz, int bus_width_bits) {
  if (memory_clock_khz <= 0 || bus_width_bits <= 0) return 0;
  return 2.0 * memory_clock_khz * 1e3 * (bus_width_bits / 8.0) / 1e9;
}

DecodePlan PlanDecodeAttention(int num_seqs, int num_q_heads, int num_kv_heads, int head_dim,
                               int max_context_len, int num_sms, const DecodePlanOptions& options) {
  // Partitions are whole multiples of the kernel's per-iteration token step.
  const int partition_size = std::max(64, options.partition_size / 64 * 64);
  const int partitions = (std::max(max_context_len, 1) + partition_size - 1) / partition_size;
  bool split = false;
  switch (options.split_k) {
    case SplitKMode::kNever:
      split = false;
      break;
    case SplitKMode::kAlways:
      split = true;
      break;
    case SplitKMode::kAuto: {
      // Without a split there is one thread block per (sequence, kv head).
      // Decode is bandwidth-bound: it needs about two resident blocks per SM
      // to keep enough loads in flight. Split only when the batch cannot
      // provide that and the context is long enough to be worth the second
      // (reduction) pass.
      const long long unsplit_blocks = static_cast<long long>(num_seqs) * num_kv_heads;
      split = unsplit_blocks < 2LL * std::max(num_sms, 1) && partitions > 1;
      break;
    }
  }
  DecodePlan plan;
  plan.prefetch =
      ChoosePrefetch(options.prefetch, split, static_cast<long long>(num_seqs) * num_kv_heads,
                     num_sms, options.peak_memory_gbps);
  if (!split) return plan;
  plan.partition_size = partition_size;
  plan.max_num_partitions = partitions;
  const size_t rows = static_cast<size_t>(num_seqs) * num_q_heads * partitions;
  // Partial outputs (f32, normalised) then one log2-sum-exp per row.
  plan.workspace_bytes = rows * head_dim * sizeof(float) + rows * sizeof(float);
  return plan;
}

}  // namespace pagoda::kernels
