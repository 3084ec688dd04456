// Runtime dtype, cache-storage and prefill-kernel dispatch for the attention
// launchers. The kernels themselves are instantiated in the per-dtype (and
// FP8) .cu files and, for the Hopper prefill kernel, its sm_90a file.
#include <type_traits>

#include "kernels/attention/decode_attention.cuh"
#include "kernels/attention/paged_attention.h"
#include "kernels/attention/prefill_attention.cuh"
#include "kernels/attention/prefill_attention_wgmma.h"

namespace pagoda::kernels {
namespace {

template <typename T>
struct AttentionTypeTag {
  using type = T;
};

// Calls body(type tag, format) for the params' dtype (bf16/f16) and cache
// format (0: the dtype, kKvFp8E4M3, kKvFp8E5M2 as std::integral_constant).
template <typename Params, typename Body>
cudaError_t DispatchKvFormat(const Params& params, Body&& body) {
  auto with_type = [&](auto tag) -> cudaError_t {
    switch (params.kv_storage) {
      case KvCacheStorage::kDType:
        return body(tag, std::integral_constant<int, 0>{});
      case KvCacheStorage::kFp8E4M3:
        return body(tag, std::integral_constant<int, kKvFp8E4M3>{});
      case KvCacheStorage::kFp8E5M2:
        return body(tag, std::integral_constant<int, kKvFp8E5M2>{});
    }
    return cudaErrorInvalidValue;
  };
  switch (params.dtype) {
    case ScalarType::kBF16:
      return with_type(AttentionTypeTag<__nv_bfloat16>{});
    case ScalarType::kF16:
      return with_type(AttentionTypeTag<__half>{});
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t LaunchDecodeAttention(const DecodeAttentionParams& params, const DecodePlan& plan,
                                  void* workspace, cudaStream_t stream) {
  if (!CheckDecodeSupported(params).ok()) return cudaErrorInvalidValue;
  DecodeAttentionParams resolved = params;  // The kernels read the stride as it is.
  resolved.q_token_stride = QueryTokenStride(params);
  return DispatchKvFormat(params, [&](auto tag, auto format) {
    using T = typename decltype(tag)::type;
    return attention_internal::LaunchDecodeForType<T, decltype(format)::value>(resolved, plan,
                                                                               workspace, stream);
  });
}

cudaError_t LaunchPrefillAttention(const PrefillAttentionParams& params, cudaStream_t stream) {
  if (!CheckPrefillSupported(params).ok()) return cudaErrorInvalidValue;
  PrefillAttentionParams resolved = params;
  resolved.q_token_stride = QueryTokenStride(params);
  if (params.kernel == PrefillKernel::kWgmma) {
    return attention_internal::LaunchPrefillWgmma(resolved, stream);
  }
  return DispatchKvFormat(params, [&](auto tag, auto format) {
    using T = typename decltype(tag)::type;
    return attention_internal::LaunchPrefillForType<T, decltype(format)::value>(resolved, stream);
  });
}

}  // namespace pagoda::kernels
