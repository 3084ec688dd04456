// The weight-only int4/int8 linear's device path (kernels/ops/int_linear.h):
// the decode GEMV and the prefill's dequantize-then-GEMM against a float64
// sum over the exactly dequantized weight (q - zero) * scale, over odd
// shapes, group sizes that do and do not fill a 16-byte vector, per-channel
// scales, act-order (shuffled groups) and bias; W8A8's int8 input codes
// and scales against the CPU's rule and its output against float64, through
// the float GEMM and through cuBLASLt's int8 GEMM (kernels/ops/w8a8_int8.h,
// scaled_gemm.h); and the host packer's refusals (kernels/ops/int_weight_pack.h). Needs a CUDA
// device; skipped without one.

#include "kernels/ops/int_linear.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops/fp8_linear.h"
#include "kernels/ops/gemm.h"
#include "kernels/ops/int_weight_pack.h"
#include "kernels/ops/scaled_gemm.h"
#include "kernels/ops/w8a8_int8.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/int_linear_test_util.h"

namespace pagoda::kernels {
namespace {

using testing::DeviceBuffer;
using testing::Encode;
using testing::RoundTrip;

using testing::DeviceIntWeight;
using testing::HostIntWeight;
using testing::IntLinearCase;
using testing::RandomWeight;
using testing::RunIntLinearCase;

class IntLinearTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(GemmContext::Create(GemmContext::kDefaultWorkspaceBytes, &gemm_),
              CUBLAS_STATUS_SUCCESS);
  }
  std::unique_ptr<GemmContext> gemm_;
};

TEST_F(IntLinearTest, GemvMatchesDequantizedWeightOverShapesAndGroups) {
  uint32_t seed = 1;
  for (ScalarType dtype : {ScalarType::kBF16, ScalarType::kF16}) {
    for (int bits : {4, 8}) {
      for (int64_t rows : {1, 3, 8}) {
        // Vector-sized groups, a ragged tail, odd groups, per channel, odd in.
        RunIntLinearCase({dtype, bits, rows, 37, 256, 128}, seed++, *gemm_);
        RunIntLinearCase({dtype, bits, rows, 5, 200, 64, false, true}, seed++, *gemm_);
        RunIntLinearCase({dtype, bits, rows, 9, 120, 40}, seed++, *gemm_);
        RunIntLinearCase({dtype, bits, rows, 11, 72, 72, false, true}, seed++, *gemm_);
        RunIntLinearCase({dtype, bits, rows, 6, 77, 77}, seed++, *gemm_);
      }
    }
  }
}

TEST_F(IntLinearTest, GemvMatchesDequantizedWeightWithActOrder) {
  uint32_t seed = 100;
  for (int bits : {4, 8}) {
    for (int64_t rows : {1, 5}) {
      RunIntLinearCase({ScalarType::kBF16, bits, rows, 19, 256, 32, true, true}, seed++, *gemm_);
      RunIntLinearCase({ScalarType::kF16, bits, rows, 7, 96, 24, true}, seed++, *gemm_);
    }
  }
}

TEST_F(IntLinearTest, PrefillDequantizeAndGemmMatchesDequantizedWeight) {
  uint32_t seed = 200;
  for (ScalarType dtype : {ScalarType::kBF16, ScalarType::kF16}) {
    for (int bits : {4, 8}) {
      RunIntLinearCase({dtype, bits, 9, 37, 256, 128, false, true}, seed++, *gemm_);
      RunIntLinearCase({dtype, bits, 33, 24, 96, 24, true}, seed++, *gemm_);
      RunIntLinearCase({dtype, bits, 17, 16, 120, 40}, seed++, *gemm_);
    }
  }
}

// The CPU worker's W8A8 input rule for one row (int_linear.h).
float HostInt8RowScale(const float* row, int64_t in) {
  float amax = 0.0f;
  for (int64_t i = 0; i < in; ++i) {
    if (!std::isfinite(row[i])) return std::nanf("");
    amax = std::max(amax, std::fabs(row[i]));
  }
  return amax / 127.0f;
}
float HostInt8Code(float x, float scale) {
  if (!(scale > 0.0f)) return 0.0f;
  return std::clamp(std::nearbyint(x / scale), -128.0f, 127.0f);
}

// W8A8 as CudaBackend::IntLinear runs it: the input codes and scales
// exactly as the CPU's rule gives them, the output against float64 over the
// codes, q - zero and s_x * s_w (an all-zero row and a NaN row included).
void RunW8A8Case(ScalarType dtype, int64_t rows, int64_t out, int64_t in, uint32_t seed,
                 GemmContext& gemm) {
  SCOPED_TRACE(std::string(ScalarTypeName(dtype)) + " W8A8 rows " + std::to_string(rows) + " out " +
               std::to_string(out) + " in " + std::to_string(in));
  std::mt19937 rng(seed);
  const IntLinearCase shape{dtype, 8, rows, out, in, in};
  HostIntWeight weight = RandomWeight(shape, rng);
  for (float& z : weight.zeros) z = 128.0f;  // compressed-tensors' signed codes
  std::vector<float> unit_scales(weight.scales.size(), 1.0f);
  HostIntWeight codes_only = weight;
  codes_only.scales = unit_scales;
  std::string error;
  const HostPackedIntWeight packed = PackIntWeight(codes_only.View(shape), &error);
  ASSERT_EQ(error, "");
  const DeviceIntWeight device(packed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<float> x(rows * in), bias(out);
  for (int64_t r = 0; r < rows; ++r) {
    const float magnitude = r == 1 ? 0.0f : std::pow(10.0f, unit(rng) * 2.0f);
    for (int64_t i = 0; i < in; ++i) x[r * in + i] = unit(rng) * magnitude;
  }
  if (rows > 2) x[2 * in + 3] = std::nanf("");
  for (float& v : bias) v = unit(rng);
  x = RoundTrip(dtype, x);

  const size_t elem = ScalarTypeSize(dtype);
  DeviceBuffer d_x(x.size() * elem), d_codes(x.size() * elem), d_x_scales(rows * 4);
  DeviceBuffer d_w(out * in * elem), d_acc(rows * out * 4), d_w_scales(out * 4), d_bias(out * 4),
      d_y(rows * out * elem);
  d_x.Upload(Encode(dtype, x));
  d_w_scales.Upload(weight.scales);
  d_bias.Upload(bias);
  const QuantizeInt8RowsParams quantize{.x = d_x.get(),
                                        .dtype = dtype,
                                        .rows = rows,
                                        .cols = in,
                                        .codes = d_codes.get(),
                                        .scales = d_x_scales.as<float>()};
  PAGODA_ASSERT_CUDA_OK(LaunchQuantizeInt8Rows(quantize, nullptr));
  PAGODA_ASSERT_CUDA_OK(
      LaunchDequantizeIntWeight(device.View(shape, packed), dtype, d_w.get(), nullptr));
  const GemmParams product{.a = d_codes.get(),
                           .w = d_w.get(),
                           .c = d_acc.get(),
                           .m = rows,
                           .n = out,
                           .k = in,
                           .dtype = dtype,
                           .out_dtype = ScalarType::kF32};
  ASSERT_EQ(Gemm(gemm, product, nullptr), CUBLAS_STATUS_SUCCESS);
  ScaleFp8OutputParams scale;
  scale.acc = d_acc.as<float>();
  scale.row_scales = d_x_scales.as<float>();
  scale.col_scales = d_w_scales.as<float>();
  scale.bias = d_bias.as<float>();
  scale.y = d_y.get();
  scale.y_row_stride = out;
  scale.dtype = dtype;
  scale.rows = rows;
  scale.cols = out;
  PAGODA_ASSERT_CUDA_OK(LaunchScaleFp8Output(scale, nullptr));
  PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());

  const std::vector<float> got_codes =
      testing::Decode(dtype, d_codes.Download<uint8_t>(x.size() * elem));
  const std::vector<float> got_scales = d_x_scales.Download<float>(rows);
  const std::vector<float> y = testing::Decode(dtype, d_y.Download<uint8_t>(rows * out * elem));
  const double rounding = testing::Tolerance(dtype);
  int bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float s_x = HostInt8RowScale(&x[r * in], in);
    if (std::isnan(s_x)) {
      EXPECT_TRUE(std::isnan(got_scales[r])) << "row " << r;
      continue;
    }
    EXPECT_EQ(got_scales[r], s_x) << "row " << r;
    for (int64_t i = 0; i < in; ++i) {
      if (got_codes[r * in + i] != HostInt8Code(x[r * in + i], s_x) && ++bad <= 5) {
        ADD_FAILURE() << "code[" << r << ", " << i << "] = " << got_codes[r * in + i];
      }
    }
    for (int64_t o = 0; o < out; ++o) {
      double sum = 0.0;
      for (int64_t i = 0; i < in; ++i) {
        sum += double{HostInt8Code(x[r * in + i], s_x)} *
               (static_cast<double>(weight.codes[o * in + i]) - 128.0);
      }
      const double want = sum * s_x * weight.scales[o] + bias[o];
      const double scaled = std::fabs(sum * s_x * weight.scales[o]) + std::fabs(bias[o]);
      const double tolerance = rounding * std::fabs(want) + std::ldexp(scaled, -20) + 1e-6;
      if (!(std::fabs(y[r * out + o] - want) <= tolerance) && ++bad <= 5) {
        ADD_FAILURE() << "y[" << r << ", " << o << "] = " << y[r * out + o] << ", want " << want;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST_F(IntLinearTest, W8A8MatchesTheEmulatedInputQuantization) {
  uint32_t seed = 300;
  for (ScalarType dtype : {ScalarType::kBF16, ScalarType::kF16}) {
    RunW8A8Case(dtype, 1, 16, 64, seed++, *gemm_);
    RunW8A8Case(dtype, 5, 37, 200, seed++, *gemm_);
    RunW8A8Case(dtype, 33, 24, 77, seed++, *gemm_);
  }
}

// W8A8 on the tensor cores as CudaBackend::W8A8Int8Chunk runs it: the
// weight's packed bytes sign-flipped, the int8 input codes (row-padded to
// 16 and zero past `in`), cuBLASLt's int8 GEMM and the int32 epilogue. The
// codes, scales and code sums exactly as the CPU's rule gives them, the
// int32 product exactly, the output against float64 over codes, q - zero
// (any zero point: the sign flip's correction) and s_x * s_w.
void RunW8A8Int8Case(ScalarType dtype, int64_t rows, int64_t out, int64_t in, bool signed_zero,
                     uint32_t seed, GemmContext& gemm) {
  SCOPED_TRACE(std::string(ScalarTypeName(dtype)) + " W8A8 int8 rows " + std::to_string(rows) +
               " out " + std::to_string(out) + " in " + std::to_string(in) +
               (signed_zero ? " zero 128" : " random zeros"));
  std::mt19937 rng(seed);
  const IntLinearCase shape{dtype, 8, rows, out, in, in};
  HostIntWeight weight = RandomWeight(shape, rng);
  if (signed_zero) {
    for (float& z : weight.zeros) z = 128.0f;
  }
  HostIntWeight codes_only = weight;
  std::fill(codes_only.scales.begin(), codes_only.scales.end(), 1.0f);
  std::string error;
  HostPackedIntWeight packed = PackIntWeight(codes_only.View(shape), &error);
  ASSERT_EQ(error, "");
  for (uint32_t& word : packed.codes) word ^= kInt8SignFlip;
  const DeviceIntWeight device(packed);
  PackedIntWeight view = device.View(shape, packed);
  view.code_xor = kInt8SignFlip;
  const int64_t ld = packed.words_per_row * 4;
  const int64_t padded = (rows + 15) / 16 * 16;

  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<float> x(rows * in), bias(out);
  for (int64_t r = 0; r < rows; ++r) {
    const float magnitude = r == 1 ? 0.0f : std::pow(10.0f, unit(rng) * 2.0f);
    for (int64_t i = 0; i < in; ++i) x[r * in + i] = unit(rng) * magnitude;
  }
  if (rows > 2) x[2 * in + 3] = std::nanf("");
  for (float& v : bias) v = unit(rng);
  x = RoundTrip(dtype, x);

  const size_t elem = ScalarTypeSize(dtype);
  DeviceBuffer d_x(x.size() * elem), d_codes(padded * ld), d_x_scales(rows * 4), d_sums(rows * 4),
      d_acc(padded * out * 4), d_w_scales(out * 4), d_bias(out * 4), d_y(rows * out * elem),
      d_w(out * in * elem);
  d_x.Upload(Encode(dtype, x));
  d_codes.Fill(0x55);  // the launcher must write the padding
  d_w_scales.Upload(weight.scales);
  d_bias.Upload(bias);
  const QuantizeInt8CodesParams quantize{.x = d_x.get(),
                                         .dtype = dtype,
                                         .rows = rows,
                                         .cols = in,
                                         .codes = d_codes.as<int8_t>(),
                                         .ld = ld,
                                         .padded_rows = padded,
                                         .scales = d_x_scales.as<float>(),
                                         .row_sums = d_sums.as<int32_t>()};
  PAGODA_ASSERT_CUDA_OK(LaunchQuantizeInt8Codes(quantize, nullptr));
  const Int8GemmParams product{.a = d_codes.as<int8_t>(),
                               .w = reinterpret_cast<const int8_t*>(view.codes),
                               .c = d_acc.as<int32_t>(),
                               .m = padded,
                               .n = out,
                               .k = ld};
  ASSERT_EQ(Int8Gemm(gemm, product, nullptr), CUBLAS_STATUS_SUCCESS);
  ScaleInt32OutputParams scale;
  scale.acc = d_acc.as<int32_t>();
  scale.row_sums = d_sums.as<int32_t>();
  scale.row_scales = d_x_scales.as<float>();
  scale.col_scale_zero = view.scale_zero;
  scale.col_scales = d_w_scales.as<float>();
  scale.bias = d_bias.as<float>();
  scale.y = d_y.get();
  scale.y_row_stride = out;
  scale.dtype = dtype;
  scale.rows = rows;
  scale.cols = out;
  PAGODA_ASSERT_CUDA_OK(LaunchScaleInt32Output(scale, nullptr));
  // The float path's weight from the flipped bytes: q - zero again.
  PAGODA_ASSERT_CUDA_OK(LaunchDequantizeIntWeight(view, dtype, d_w.get(), nullptr));
  PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());

  const std::vector<int8_t> codes = d_codes.Download<int8_t>(padded * ld);
  const std::vector<float> scales = d_x_scales.Download<float>(rows);
  const std::vector<int32_t> sums = d_sums.Download<int32_t>(rows);
  const std::vector<int32_t> acc = d_acc.Download<int32_t>(padded * out);
  const std::vector<float> y = testing::Decode(dtype, d_y.Download<uint8_t>(rows * out * elem));
  const std::vector<float> w = testing::Decode(dtype, d_w.Download<uint8_t>(out * in * elem));
  int bad = 0;
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      const double want = static_cast<double>(weight.codes[o * in + i]) - weight.zeros[o];
      if (w[o * in + i] != static_cast<float>(want) && ++bad <= 5) {
        ADD_FAILURE() << "w[" << o << ", " << i << "] = " << w[o * in + i] << ", want " << want;
      }
    }
  }
  for (int64_t r = 0; r < padded; ++r) {
    const float s_x = r < rows ? HostInt8RowScale(&x[r * in], in) : 0.0f;
    int64_t want_sum = 0;
    for (int64_t i = 0; i < ld; ++i) {
      const float q = r < rows && i < in ? HostInt8Code(x[r * in + i], s_x) : 0.0f;
      want_sum += static_cast<int64_t>(q);
      if (codes[r * ld + i] != static_cast<int8_t>(q) && ++bad <= 5) {
        ADD_FAILURE() << "code[" << r << ", " << i << "] = " << int{codes[r * ld + i]};
      }
    }
    if (r >= rows) continue;
    EXPECT_EQ(sums[r], want_sum) << "row " << r;
    if (std::isnan(s_x)) {
      EXPECT_TRUE(std::isnan(scales[r])) << "row " << r;
    } else {
      EXPECT_EQ(scales[r], s_x) << "row " << r;
    }
    for (int64_t o = 0; o < out; ++o) {
      int64_t flipped = 0, exact = 0;
      for (int64_t i = 0; i < in; ++i) {
        const int64_t q = static_cast<int64_t>(HostInt8Code(x[r * in + i], s_x));
        flipped += q * (int64_t{weight.codes[o * in + i]} - 128);
        exact += q * (int64_t{weight.codes[o * in + i]} - static_cast<int64_t>(weight.zeros[o]));
      }
      if (acc[r * out + o] != flipped && ++bad <= 5) {
        ADD_FAILURE() << "acc[" << r << ", " << o << "] = " << acc[r * out + o] << ", want "
                      << flipped;
      }
      if (std::isnan(s_x)) {
        EXPECT_TRUE(std::isnan(y[r * out + o])) << "y[" << r << ", " << o << "]";
        continue;
      }
      const double want = static_cast<double>(exact) * s_x * weight.scales[o] + bias[o];
      const double scaled = std::fabs(static_cast<double>(exact) * s_x * weight.scales[o]);
      const double tolerance = testing::Tolerance(dtype) * std::fabs(want) +
                               std::ldexp(scaled + std::fabs(bias[o]), -20) + 1e-6;
      if (!(std::fabs(y[r * out + o] - want) <= tolerance) && ++bad <= 5) {
        ADD_FAILURE() << "y[" << r << ", " << o << "] = " << y[r * out + o] << ", want " << want;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST_F(IntLinearTest, W8A8Int8TensorCoresMatchTheEmulatedInputQuantization) {
  uint32_t seed = 400;
  for (ScalarType dtype : {ScalarType::kBF16, ScalarType::kF16}) {
    for (bool signed_zero : {true, false}) {
      RunW8A8Int8Case(dtype, 1, 16, 64, signed_zero, seed++, *gemm_);
      RunW8A8Int8Case(dtype, 5, 48, 200, signed_zero, seed++, *gemm_);  // in not a multiple of 16
      RunW8A8Int8Case(dtype, 33, 32, 77, signed_zero, seed++, *gemm_);
      RunW8A8Int8Case(dtype, 130, 272, 1040, signed_zero, seed++, *gemm_);
    }
  }
}

TEST_F(IntLinearTest, Int8GemmDeclinesWhatCublasLtCannotTake) {
  DeviceBuffer a(64 * 64), w(64 * 64), c(64 * 64 * 4);
  Int8GemmParams p{
      .a = a.as<int8_t>(), .w = w.as<int8_t>(), .c = c.as<int32_t>(), .m = 16, .n = 24, .k = 64};
  EXPECT_EQ(Int8Gemm(*gemm_, p, nullptr), CUBLAS_STATUS_NOT_SUPPORTED);  // n % 16
  p.n = 16;
  p.k = 36;
  EXPECT_EQ(Int8Gemm(*gemm_, p, nullptr), CUBLAS_STATUS_NOT_SUPPORTED);  // k % 16
  p.k = 64;
  p.a = a.as<int8_t>() + 4;
  EXPECT_EQ(Int8Gemm(*gemm_, p, nullptr), CUBLAS_STATUS_NOT_SUPPORTED);  // 4-byte aligned
  p.a = nullptr;
  EXPECT_EQ(Int8Gemm(*gemm_, p, nullptr), CUBLAS_STATUS_INVALID_VALUE);
  QuantizeInt8CodesParams q{.x = a.get(),
                            .dtype = ScalarType::kBF16,
                            .rows = 2,
                            .cols = 8,
                            .codes = a.as<int8_t>(),
                            .ld = 4,
                            .padded_rows = 16,
                            .scales = c.as<float>(),
                            .row_sums = c.as<int32_t>()};
  EXPECT_EQ(LaunchQuantizeInt8Codes(q, nullptr), cudaErrorInvalidValue);  // ld < cols
  q.ld = 8;
  q.padded_rows = 1;
  EXPECT_EQ(LaunchQuantizeInt8Codes(q, nullptr), cudaErrorInvalidValue);  // padded < rows
}

TEST(IntWeightPackTest, RefusesWhatTheLayoutCannotHold) {
  const std::vector<uint8_t> codes = {1, 2, 3, 4};
  const std::vector<float> scales = {1, 1}, zeros = {8, 8};
  const std::vector<int32_t> uneven = {0, 1, 1, 1};
  UnpackedIntWeight w{.bits = 4,
                      .out = 1,
                      .in = 4,
                      .num_groups = 2,
                      .codes = codes.data(),
                      .scales = scales.data(),
                      .zeros = zeros.data(),
                      .group_of_input = uneven.data()};
  std::string error;
  PackIntWeight(w, &error);
  EXPECT_NE(error.find("different numbers"), std::string::npos) << error;
  const std::vector<int32_t> even = {1, 0, 1, 0};
  w.group_of_input = even.data();
  const HostPackedIntWeight packed = PackIntWeight(w, &error);
  EXPECT_EQ(error, "");
  EXPECT_EQ(packed.perm, (std::vector<int32_t>{1, 3, 0, 2}));
  EXPECT_EQ(packed.codes[0], 2u | 4u << 4 | 1u << 8 | 3u << 12);
  const std::vector<float> half_zero = {8.5f, 8};
  w.zeros = half_zero.data();
  PackIntWeight(w, &error);
  EXPECT_NE(error.find("zero point"), std::string::npos) << error;
  w.zeros = zeros.data();
  const std::vector<uint8_t> wide = {1, 2, 16, 4};
  w.codes = wide.data();
  PackIntWeight(w, &error);
  EXPECT_NE(error.find("out of range"), std::string::npos) << error;
}

}  // namespace
}  // namespace pagoda::kernels
