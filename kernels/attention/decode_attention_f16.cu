// f16 instantiations of the decode attention kernels (a file per dtype so the
// two compile in parallel).
#include "kernels/attention/decode_attention.cuh"

namespace pagoda::kernels::attention_internal {
template cudaError_t LaunchDecodeForType<__half>(const DecodeAttentionParams&, const DecodePlan&,
                                                 void*, cudaStream_t);
}  // namespace pagoda::kernels::attention_internal
