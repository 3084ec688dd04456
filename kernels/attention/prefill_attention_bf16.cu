// bf16 instantiations of the prefill attention kernel over a bf16 cache.
#include "kernels/attention/prefill_attention.cuh"

namespace pagoda::kernels::attention_internal {
template cudaError_t LaunchPrefillForType<__nv_bfloat16, false>(const PrefillAttentionParams&,
                                                                cudaStream_t);
}  // namespace pagoda::kernels::attention_internal
