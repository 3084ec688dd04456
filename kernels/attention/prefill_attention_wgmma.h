// Host entry of the Hopper prefill kernel (prefill_attention_wgmma.cu, built
// for sm_90a only): attention_launch.cu calls it when the params ask for
// PrefillKernel::kWgmma. Plain C++ so that translation units built for plain
// sm_90 can include it.
#ifndef PAGODA_KERNELS_ATTENTION_PREFILL_ATTENTION_WGMMA_H_
#define PAGODA_KERNELS_ATTENTION_PREFILL_ATTENTION_WGMMA_H_

#include <cuda_runtime_api.h>

#include "kernels/attention/paged_attention.h"

namespace pagoda::kernels::attention_internal {

// REQUIRES: CheckPrefillSupported(params).ok() and params.q_token_stride
// resolved (non-zero). Returns cudaErrorInvalidValue on a device other than
// compute capability 9.0, an FP8 cache, or a shape without a variant, and
// cudaErrorInvalidValue too when the driver refuses the K/V tensor maps.
cudaError_t LaunchPrefillWgmma(const PrefillAttentionParams& params, cudaStream_t stream);

}  // namespace pagoda::kernels::attention_internal

#endif  // PAGODA_KERNELS_ATTENTION_PREFILL_ATTENTION_WGMMA_H_
