#ifndef PAGODA_KERNELS_ALIGNMENT_H_
#define PAGODA_KERNELS_ALIGNMENT_H_

// The one alignment test of the kernels' host-side planners: attention and
// the cache ops move rows with 16-byte vector loads and stores (uint4), which
// need 16-byte aligned addresses.

#include <cstdint>

namespace pagoda::kernels {

inline bool Aligned16(const void* pointer) {
  return reinterpret_cast<uintptr_t>(pointer) % 16 == 0;
}

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_ALIGNMENT_H_
