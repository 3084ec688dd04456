#ifndef PAGODA_TESTS_KERNELS_INT_LINEAR_TEST_UTIL_H_
#define PAGODA_TESTS_KERNELS_INT_LINEAR_TEST_UTIL_H_

// Shared by the int linear kernel tests (kernels/ops/int_linear_test.cc,
// int_gemm_fused_test.cc): a case's shape, a random checkpoint weight in
// worker/quant's unpacked form, its device copy in int_linear.h's packed
// layout, and one case run through a device path against a float64 sum over
// the exactly dequantized weight.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops/gemm.h"
#include "kernels/ops/int_linear.h"
#include "kernels/ops/int_weight_pack.h"
#include "tests/kernels/cuda_test_util.h"

namespace pagoda::kernels::testing {

struct IntLinearCase {
  ScalarType dtype = ScalarType::kBF16;
  int bits = 4;
  int64_t rows = 1;
  int64_t out = 8;
  int64_t in = 64;
  int64_t group_size = 32;  // in: per channel
  bool act_order = false;
  bool bias = false;
  bool fused = false;  // LaunchFusedIntGemm instead of the GEMV or dequantize + GEMM

  std::string Name() const {
    return std::string(ScalarTypeName(dtype)) + " int" + std::to_string(bits) + " rows " +
           std::to_string(rows) + " out " + std::to_string(out) + " in " + std::to_string(in) +
           " group " + std::to_string(group_size) + (act_order ? " act-order" : "") +
           (bias ? " bias" : "") + (fused ? " fused" : "");
  }
};

// A checkpoint's weight in worker/quant's unpacked form: random codes,
// integral zero points, positive scales; act-order gives inputs to groups
// in a shuffled order (GPTQ desc_act's g_idx), each group group_size inputs.
struct HostIntWeight {
  std::vector<uint8_t> codes;
  std::vector<float> scales, zeros;
  std::vector<int32_t> group_of_input;
  int64_t num_groups = 0;

  UnpackedIntWeight View(const IntLinearCase& c) const {
    return UnpackedIntWeight{.bits = c.bits,
                             .out = c.out,
                             .in = c.in,
                             .num_groups = num_groups,
                             .codes = codes.data(),
                             .scales = scales.data(),
                             .zeros = zeros.data(),
                             .group_of_input = group_of_input.data()};
  }
  double Dequantized(const IntLinearCase& c, int64_t o, int64_t i) const {
    const int64_t g = o * num_groups + group_of_input[i];
    return (static_cast<double>(codes[o * c.in + i]) - zeros[g]) * scales[g];
  }
};

HostIntWeight RandomWeight(const IntLinearCase& c, std::mt19937& rng);

// Device copies of a packed weight.
struct DeviceIntWeight {
  explicit DeviceIntWeight(const HostPackedIntWeight& h)
      : codes(h.codes.size() * 4),
        scale_zero(h.scale_zero.size() * 4),
        perm(std::max<size_t>(h.perm.size(), 1) * 4) {
    codes.Upload(h.codes);
    scale_zero.Upload(h.scale_zero);
    if (!h.perm.empty()) perm.Upload(h.perm);
  }
  PackedIntWeight View(const IntLinearCase& c, const HostPackedIntWeight& h) const {
    return PackedIntWeight{.codes = codes.as<uint32_t>(),
                           .scale_zero = scale_zero.as<float2>(),
                           .perm = h.perm.empty() ? nullptr : perm.as<int32_t>(),
                           .bits = c.bits,
                           .out = c.out,
                           .in = c.in,
                           .words_per_row = h.words_per_row,
                           .group_size = h.group_size,
                           .runs = h.runs};
  }
  DeviceBuffer codes, scale_zero, perm;
};

// One case: a random weight (seeded), inputs and bias; y through
// LaunchFusedIntGemm (c.fused), the GEMV (rows <= kIntGemvMaxRows, inputs
// permuted first for act-order) or the dequantized weight and the dense
// GEMM; every output against float64 within the path's roundings.
void RunIntLinearCase(const IntLinearCase& c, uint32_t seed, GemmContext& gemm);

}  // namespace pagoda::kernels::testing

#endif  // PAGODA_TESTS_KERNELS_INT_LINEAR_TEST_UTIL_H_
