#ifndef PAGODA_KERNELS_OPS_PHILOX_H_
#define PAGODA_KERNELS_OPS_PHILOX_H_

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC'11): a counter-based generator, so draw n of stream (seed, index) is
// a pure function of those values. Sampling uses it so that a row's random
// numbers never depend on which batch the row landed in. Usable on host and
// device; no state.

#include <cstdint>

#if defined(__CUDACC__)
#define PAGODA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define PAGODA_HOST_DEVICE inline
#endif

namespace pagoda::kernels {

struct Philox4x32Block {
  uint32_t v[4];
};

PAGODA_HOST_DEVICE Philox4x32Block Philox4x32(Philox4x32Block counter, uint32_t key0,
                                              uint32_t key1) {
  constexpr uint32_t kMul0 = 0xD2511F53u;
  constexpr uint32_t kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u;
  constexpr uint32_t kWeyl1 = 0xBB67AE85u;
  uint32_t* c = counter.v;
  for (int round = 0; round < 10; ++round) {
    const uint64_t product0 = static_cast<uint64_t>(kMul0) * c[0];
    const uint64_t product1 = static_cast<uint64_t>(kMul1) * c[2];
    const uint32_t hi0 = static_cast<uint32_t>(product0 >> 32);
    const uint32_t lo0 = static_cast<uint32_t>(product0);
    const uint32_t hi1 = static_cast<uint32_t>(product1 >> 32);
    const uint32_t lo1 = static_cast<uint32_t>(product1);
    const Philox4x32Block next = {{hi1 ^ c[1] ^ key0, lo1, hi0 ^ c[3] ^ key1, lo0}};
    counter = next;
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  return counter;
}

// Four 32-bit draws for group `group` of the stream (seed, stream_index).
PAGODA_HOST_DEVICE Philox4x32Block PhiloxDraws(uint64_t seed, uint64_t stream_index,
                                               uint64_t group) {
  const Philox4x32Block counter = {
      {static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32),
       static_cast<uint32_t>(stream_index), static_cast<uint32_t>(stream_index >> 32)}};
  return Philox4x32(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Maps 32 random bits to a float strictly inside (0, 1): 23 bits plus a
// half step (24 significant bits, exact in float, so never rounds to 1), and
// log(u) and log(-log(u)) are always finite.
PAGODA_HOST_DEVICE float UniformOpen01(uint32_t bits) {
  return (static_cast<float>(bits >> 9) + 0.5f) * (1.0f / 8388608.0f);
}

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_OPS_PHILOX_H_
