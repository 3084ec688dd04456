#ifndef PAGODA_KERNELS_OPS_INT_WEIGHT_PACK_H_
#define PAGODA_KERNELS_OPS_INT_WEIGHT_PACK_H_

// Host packing of an unpacked int4/int8 weight (one code a byte, per-group
// scales and zero points, each input's group: worker/quant's common form)
// into kernels/ops/int_linear.h's device layout: inputs sorted by group,
// codes packed 32 / bits to a uint32 word, rows padded to 16 bytes,
// (scale, zero) pairs per run of group_size sorted inputs.

#include <cstdint>
#include <string>
#include <vector>

namespace pagoda::kernels {

struct UnpackedIntWeight {
  int bits = 4;
  int64_t out = 0;
  int64_t in = 0;
  int64_t num_groups = 0;
  const uint8_t* codes = nullptr;           // [out, in], each < 2^bits
  const float* scales = nullptr;            // [out, num_groups]
  const float* zeros = nullptr;             // [out, num_groups]
  const int32_t* group_of_input = nullptr;  // [in], each in [0, num_groups)
};

struct HostPackedIntWeight {
  std::vector<uint32_t> codes;    // [out, words_per_row]
  std::vector<float> scale_zero;  // [out, runs, 2]
  std::vector<int32_t> perm;      // [in], empty when the identity
  int64_t words_per_row = 0;
  int64_t group_size = 0;
  int64_t runs = 0;
};

// The packed weight, or an empty error string; otherwise `error` says what
// the layout cannot hold: bits other than 4 or 8, a code out of range, a
// zero point that is not an integer in [0, 2^bits], or groups whose sorted
// runs differ in size (only the last may be shorter).
HostPackedIntWeight PackIntWeight(const UnpackedIntWeight& weight, std::string* error);

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_OPS_INT_WEIGHT_PACK_H_
