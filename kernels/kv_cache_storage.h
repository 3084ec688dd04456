#ifndef PAGODA_KERNELS_KV_CACHE_STORAGE_H_
#define PAGODA_KERNELS_KV_CACHE_STORAGE_H_

// How the paged KV cache holds K and V, for the CUDA cache-write and
// attention kernels (kernels/ops/cache_ops.h, kernels/attention/
// paged_attention.h): host-only, dependency-free.

namespace pagoda::kernels {

// kDType: the elements are of the kernel's dtype (bf16/f16), written and
// read as they are. kFp8E4M3 (--kv-cache-dtype fp8): one byte an element,
// the E4M3 ("fn") code of x / scale with the layer's k_scale or v_scale,
// rounded to nearest even and saturated to +-448 (a NaN stays NaN), and
// read back as code * scale: the CPU worker's rule (common/fp8.h,
// worker/backend.h KvCacheLayer) and vLLM's. kFp8E5M2 (--kv-cache-dtype
// fp8_e5m2): the same with E5M2 codes (bias 15, saturated to +-57344), the
// CPU worker's other FP8 cache.
enum class KvCacheStorage { kDType, kFp8E4M3, kFp8E5M2 };

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_KV_CACHE_STORAGE_H_
