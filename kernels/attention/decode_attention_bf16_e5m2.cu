// bf16 instantiations of the decode attention kernels over an FP8 E5M2 cache.
#include "kernels/attention/decode_attention.cuh"

namespace pagoda::kernels::attention_internal {
template cudaError_t LaunchDecodeForType<__nv_bfloat16, kKvFp8E5M2>(const DecodeAttentionParams&,
                                                                    const DecodePlan&, void*,
                                                                    cudaStream_t);
}  // namespace pagoda::kernels::attention_internal
