// One 16-byte vector of T (8 bf16/f16 or 4 f32), for the elementwise kernels'
// wide paths: a warp's loads of consecutive vectors coalesce into 512-byte
// transactions, and each thread keeps several loads in flight with fewer
// instructions than element-wise access. Callers check alignment on the host
// (kernels/alignment.h) and fall back to their element-wise kernels.
#ifndef PAGODA_KERNELS_OPS_VEC16_CUH_
#define PAGODA_KERNELS_OPS_VEC16_CUH_

namespace pagoda::kernels {

template <typename T>
struct alignas(16) Vec16 {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_OPS_VEC16_CUH_
