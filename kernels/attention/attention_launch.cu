// Runtime dtype, cache-storage and prefill-kernel dispatch for the attention
// launchers. The kernels themselves are instantiated in the per-dtype (and
// FP8) .cu files and, for the Hopper prefill kernel, its sm_90a file.
#include "kernels/attention/decode_attention.cuh"
#include "kernels/attention/paged_attention.h"
#include "kernels/attention/prefill_attention.cuh"
#include "kernels/attention/prefill_attention_wgmma.h"

namespace pagoda::kernels {

cudaError_t LaunchDecodeAttention(const DecodeAttentionParams& params, const DecodePlan& plan,
                                  void* workspace, cudaStream_t stream) {
  if (!CheckDecodeSupported(params).ok()) return cudaErrorInvalidValue;
  DecodeAttentionParams resolved = params;  // The kernels read the stride as it is.
  resolved.q_token_stride = QueryTokenStride(params);
  const bool fp8 = params.kv_storage == KvCacheStorage::kFp8E4M3;
  switch (params.dtype) {
    case ScalarType::kBF16:
      return fp8 ? attention_internal::LaunchDecodeForType<__nv_bfloat16, true>(resolved, plan,
                                                                                workspace, stream)
                 : attention_internal::LaunchDecodeForType<__nv_bfloat16, false>(resolved, plan,
                                                                                 workspace, stream);
    case ScalarType::kF16:
      return fp8 ? attention_internal::LaunchDecodeForType<__half, true>(resolved, plan, workspace,
                                                                         stream)
                 : attention_internal::LaunchDecodeForType<__half, false>(resolved, plan, workspace,
                                                                          stream);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t LaunchPrefillAttention(const PrefillAttentionParams& params, cudaStream_t stream) {
  if (!CheckPrefillSupported(params).ok()) return cudaErrorInvalidValue;
  PrefillAttentionParams resolved = params;
  resolved.q_token_stride = QueryTokenStride(params);
  if (params.kernel == PrefillKernel::kWgmma) {
    return attention_internal::LaunchPrefillWgmma(resolved, stream);
  }
  const bool fp8 = params.kv_storage == KvCacheStorage::kFp8E4M3;
  switch (params.dtype) {
    case ScalarType::kBF16:
      return fp8 ? attention_internal::LaunchPrefillForType<__nv_bfloat16, true>(resolved, stream)
                 : attention_internal::LaunchPrefillForType<__nv_bfloat16, false>(resolved, stream);
    case ScalarType::kF16:
      return fp8 ? attention_internal::LaunchPrefillForType<__half, true>(resolved, stream)
                 : attention_internal::LaunchPrefillForType<__half, false>(resolved, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace pagoda::kernels
