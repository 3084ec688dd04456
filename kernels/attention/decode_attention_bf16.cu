// bf16 instantiations of the decode attention kernels over a bf16 cache (a
// file per dtype and cache storage so they compile in parallel).
#include "kernels/attention/decode_attention.cuh"

namespace pagoda::kernels::attention_internal {
template cudaError_t LaunchDecodeForType<__nv_bfloat16, false>(const DecodeAttentionParams&,
                                                               const DecodePlan&, void*,
                                                               cudaStream_t);
}  // namespace pagoda::kernels::attention_internal
