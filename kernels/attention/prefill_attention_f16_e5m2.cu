// f16 instantiations of the prefill attention kernel over an FP8 E5M2 cache.
#include "kernels/attention/prefill_attention.cuh"

namespace pagoda::kernels::attention_internal {
template cudaError_t LaunchPrefillForType<__half, kKvFp8E5M2>(const PrefillAttentionParams&,
                                                              cudaStream_t);
}  // namespace pagoda::kernels::attention_internal
