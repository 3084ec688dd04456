// The FP8 W8A8 linear's device path — activation quantization, cuBLASLt's
// E4M3 GEMM and the output scaling (kernels/ops/fp8_linear.h, gemm.h) —
// against the CPU worker's rule: the quantized inputs' codes and scales bit
// for bit (common/fp8.h), the product and the output against a float64 sum
// over the exactly dequantized weights and the emulated input quantization;
// and the same product with the scales inside cuBLASLt and a bf16/f16
// output (kernels/ops/scaled_gemm.h). Needs a CUDA device; skipped without one.

#include "kernels/ops/fp8_linear.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/fp8.h"
#include "kernels/ops/gemm.h"
#include "kernels/ops/scaled_gemm.h"
#include "tests/kernels/cuda_test_util.h"

namespace pagoda::kernels {
namespace {

using testing::DeviceBuffer;
using testing::Encode;
using testing::RoundTrip;

struct Fp8LinearCase {
  ScalarType dtype = ScalarType::kBF16;  // of x and y
  int64_t rows = 1;
  int64_t out = 16;
  int64_t in = 16;
  bool per_channel = true;  // weight scales per output row, else one
  Fp8InputScaling scaling = Fp8InputScaling::kPerToken;
  float static_scale = 0.01f;
  bool bias = false;

  std::string Name() const {
    return std::string(ScalarTypeName(dtype)) + " rows " + std::to_string(rows) + " out " +
           std::to_string(out) + " in " + std::to_string(in) +
           (per_channel ? " per-channel" : " per-tensor") +
           (scaling == Fp8InputScaling::kPerToken ? " per-token"
                                                  : " static " + std::to_string(static_scale)) +
           (bias ? " bias" : "");
  }
};

// A checkpoint's FP8 weight: codes E4M3(W / s_w), s_w = max|W| / 448 per
// row (or over the tensor), as the publishers' tools quantize.
struct HostFp8Weight {
  std::vector<uint8_t> codes;  // [out, in]
  std::vector<float> scales;   // [out]
};

HostFp8Weight QuantizeWeight(const std::vector<float>& w, int64_t out, int64_t in,
                             bool per_channel) {
  HostFp8Weight q{std::vector<uint8_t>(w.size()), std::vector<float>(out)};
  float tensor_max = 0.0f;
  for (float v : w) tensor_max = std::max(tensor_max, std::fabs(v));
  for (int64_t o = 0; o < out; ++o) {
    float row_max = 0.0f;
    for (int64_t i = 0; i < in; ++i) row_max = std::max(row_max, std::fabs(w[o * in + i]));
    q.scales[o] = (per_channel ? row_max : tensor_max) / kFp8E4M3Max;
    for (int64_t i = 0; i < in; ++i) {
      q.codes[o * in + i] = FloatToFp8E4M3(w[o * in + i] / q.scales[o]);
    }
  }
  return q;
}

// The CPU worker's input quantization of one row (w8a8_linear.cc).
float HostRowScale(const float* row, int64_t in, const Fp8LinearCase& c) {
  if (c.scaling == Fp8InputScaling::kStatic) return c.static_scale;
  float amax = 0.0f;
  for (int64_t i = 0; i < in; ++i) amax = std::max(amax, std::fabs(row[i]));
  return std::max(amax / kFp8E4M3Max, kMinFp8TokenScale);
}

// Inputs: rows of different magnitudes (1e-3 .. 30), an all-zero row (the
// smallest scale), and with a static scale values past 448 * scale
// (saturating).
std::vector<float> RandomInputs(const Fp8LinearCase& c, std::mt19937& rng) {
  std::vector<float> x(c.rows * c.in);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_real_distribution<float> log_magnitude(-3.0f, 1.5f);
  for (int64_t r = 0; r < c.rows; ++r) {
    const float magnitude = r == 1 ? 0.0f : std::pow(10.0f, log_magnitude(rng));
    for (int64_t i = 0; i < c.in; ++i) x[r * c.in + i] = unit(rng) * magnitude;
  }
  return RoundTrip(c.dtype, x);
}

void RunFp8LinearCase(const Fp8LinearCase& c, uint32_t seed, GemmContext& gemm) {
  SCOPED_TRACE(c.Name());
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<float> w(c.out * c.in);
  for (float& v : w) v = unit(rng) * 0.05f;
  const HostFp8Weight weight = QuantizeWeight(w, c.out, c.in, c.per_channel);
  std::vector<float> bias(c.out);
  for (float& v : bias) v = unit(rng);
  const std::vector<float> x = RandomInputs(c, rng);

  // The CPU's quantized inputs.
  std::vector<uint8_t> want_codes(x.size());
  std::vector<float> want_scales(c.rows);
  for (int64_t r = 0; r < c.rows; ++r) {
    want_scales[r] = HostRowScale(&x[r * c.in], c.in, c);
    for (int64_t i = 0; i < c.in; ++i) {
      want_codes[r * c.in + i] = FloatToFp8E4M3(x[r * c.in + i] / want_scales[r]);
    }
  }

  // The GEMM's rows padded to a multiple of 16 with zero codes (gemm.h).
  const int64_t padded_rows = (c.rows + 15) / 16 * 16;
  const size_t elem = ScalarTypeSize(c.dtype);
  DeviceBuffer d_x(x.size() * elem), d_codes(padded_rows * c.in), d_scales(c.rows * 4);
  DeviceBuffer d_w(weight.codes.size()), d_w_scales(c.out * 4), d_bias(c.out * 4);
  DeviceBuffer d_acc(padded_rows * c.out * 4), d_y(c.rows * c.out * elem);
  d_codes.Fill(0);
  d_x.Upload(Encode(c.dtype, x));
  d_w.Upload(weight.codes);
  d_w_scales.Upload(weight.scales);
  d_bias.Upload(bias);
  d_y.Fill(0xFF);

  QuantizeFp8RowsParams quantize;
  quantize.x = d_x.get();
  quantize.x_row_stride = c.in;
  quantize.dtype = c.dtype;
  quantize.rows = c.rows;
  quantize.cols = c.in;
  quantize.scaling = c.scaling;
  quantize.static_scale = c.static_scale;
  quantize.codes = d_codes.as<uint8_t>();
  quantize.scales = d_scales.as<float>();
  PAGODA_ASSERT_CUDA_OK(LaunchQuantizeFp8Rows(quantize, nullptr));
  GemmParams product{.a = d_codes.get(),
                     .w = d_w.get(),
                     .c = d_acc.get(),
                     .m = padded_rows,
                     .n = c.out,
                     .k = c.in,
                     .dtype = ScalarType::kFp8E4M3,
                     .out_dtype = ScalarType::kF32};
  ASSERT_EQ(Gemm(gemm, product, nullptr), CUBLAS_STATUS_SUCCESS);
  ScaleFp8OutputParams scale;
  scale.acc = d_acc.as<float>();
  scale.row_scales = d_scales.as<float>();
  scale.col_scales = d_w_scales.as<float>();
  scale.bias = c.bias ? d_bias.as<float>() : nullptr;
  scale.y = d_y.get();
  scale.y_row_stride = c.out;
  scale.dtype = c.dtype;
  scale.rows = c.rows;
  scale.cols = c.out;
  PAGODA_ASSERT_CUDA_OK(LaunchScaleFp8Output(scale, nullptr));
  // The same product with both scales inside cuBLASLt, straight to dtype
  // (scaled_gemm.h; no bias: CudaBackend adds none on that path).
  bool fused = c.dtype != ScalarType::kF32;
  DeviceBuffer d_fused(padded_rows * c.out * elem);
  if (fused) {
    const Fp8ScaledGemmParams scaled{.a = d_codes.as<uint8_t>(),
                                     .w = d_w.as<uint8_t>(),
                                     .row_scales = d_scales.as<float>(),
                                     .col_scales = d_w_scales.as<float>(),
                                     .c = d_fused.get(),
                                     .m = padded_rows,
                                     .n = c.out,
                                     .k = c.in,
                                     .out_dtype = c.dtype};
    // A library without outer-vector FP8 scaling on this GPU declines it
    // (CudaBackend then takes the f32 path, checked above): said, not failed.
    const cublasStatus_t status = Fp8ScaledGemm(gemm, scaled, nullptr);
    if (status == CUBLAS_STATUS_NOT_SUPPORTED) {
      std::printf("Fp8ScaledGemm declined [%ld x %ld] x [%ld x %ld]^T on this GPU\n",
                  static_cast<long>(padded_rows), static_cast<long>(c.in), static_cast<long>(c.out),
                  static_cast<long>(c.in));
      fused = false;
    } else {
      ASSERT_EQ(status, CUBLAS_STATUS_SUCCESS);
    }
  }
  PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());

  // The quantization, exactly.
  EXPECT_TRUE(d_codes.Download<uint8_t>(x.size()) == want_codes);
  EXPECT_TRUE(d_scales.Download<float>(c.rows) == want_scales);

  // The product and output against float64 over the exact values. The
  // tensor cores accumulate E4M3 products in chunks of reduced precision
  // (promoted to f32 between chunks): allowed 2^-12 of the sum of |terms|.
  const std::vector<float> acc = d_acc.Download<float>(c.rows * c.out);
  const std::vector<float> y_fused =
      fused ? testing::Decode(c.dtype, d_fused.Download<uint8_t>(c.rows * c.out * elem))
            : std::vector<float>();
  const std::vector<float> y =
      testing::Decode(c.dtype, d_y.Download<uint8_t>(c.rows * c.out * elem));
  const double output_rounding = c.dtype == ScalarType::kF16    ? std::ldexp(1.0, -11)
                                 : c.dtype == ScalarType::kBF16 ? std::ldexp(1.0, -8)
                                                                : 0.0;
  int bad_acc = 0, bad_y = 0;
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t o = 0; o < c.out; ++o) {
      double sum = 0.0, magnitude = 0.0;
      for (int64_t i = 0; i < c.in; ++i) {
        const double term = double{Fp8E4M3ToFloat(want_codes[r * c.in + i])} *
                            Fp8E4M3ToFloat(weight.codes[o * c.in + i]);
        sum += term;
        magnitude += std::fabs(term);
      }
      const double acc_tolerance = std::ldexp(magnitude, -12) + 1e-6;
      if (std::fabs(acc[r * c.out + o] - sum) > acc_tolerance && ++bad_acc <= 5) {
        ADD_FAILURE() << "acc[" << r << ", " << o << "] = " << acc[r * c.out + o] << ", want "
                      << sum;
      }
      const double factor = double{want_scales[r]} * weight.scales[o];
      const double want = sum * factor + (c.bias ? bias[o] : 0.0);
      const double tolerance = acc_tolerance * factor + output_rounding * std::fabs(want) +
                               std::ldexp(std::fabs(want), -20) + 1e-7;
      if (!(std::fabs(y[r * c.out + o] - want) <= tolerance) && ++bad_y <= 5) {
        ADD_FAILURE() << "y[" << r << ", " << o << "] = " << y[r * c.out + o] << ", want " << want;
      }
      const double want_fused = sum * factor;
      const double tolerance_fused = acc_tolerance * factor +
                                     output_rounding * std::fabs(want_fused) +
                                     std::ldexp(std::fabs(want_fused), -20) + 1e-7;
      if (fused && !(std::fabs(y_fused[r * c.out + o] - want_fused) <= tolerance_fused) &&
          ++bad_y <= 5) {
        ADD_FAILURE() << "fused y[" << r << ", " << o << "] = " << y_fused[r * c.out + o]
                      << ", want " << want_fused;
      }
    }
  }
  EXPECT_EQ(bad_acc, 0);
  EXPECT_EQ(bad_y, 0);
}

class Fp8LinearTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(GemmContext::Create(GemmContext::kDefaultWorkspaceBytes, &gemm_),
              CUBLAS_STATUS_SUCCESS);
  }
  std::unique_ptr<GemmContext> gemm_;
};

TEST_F(Fp8LinearTest, SweepShapesScalesAndDtypes) {
  struct Shape {
    int64_t rows, out, in;
  };
  // Odd row counts; out and in multiples of 16 (cuBLASLt's FP8 rule) but
  // not of the tile sizes; one Llama-8B-sized k.
  const Shape shapes[] = {{1, 16, 16}, {7, 48, 80}, {33, 272, 528}, {300, 96, 4096}, {2, 1040, 64}};
  uint32_t seed = 1;
  for (ScalarType dtype : {ScalarType::kBF16, ScalarType::kF16, ScalarType::kF32}) {
    for (const Shape& shape : shapes) {
      for (bool per_channel : {true, false}) {
        Fp8LinearCase c;
        c.dtype = dtype;
        c.rows = shape.rows;
        c.out = shape.out;
        c.in = shape.in;
        c.per_channel = per_channel;
        c.bias = seed % 2 == 0;
        RunFp8LinearCase(c, seed++, *gemm_);
      }
    }
  }
}

TEST_F(Fp8LinearTest, StaticInputScaleSaturates) {
  // Inputs up to 30 over a static scale of 0.01: everything past 4.48
  // saturates to +-448 codes, as the CPU's and vLLM's static FP8 inputs do.
  uint32_t seed = 100;
  for (ScalarType dtype : {ScalarType::kBF16, ScalarType::kF16}) {
    for (float static_scale : {0.01f, 0.37f}) {
      Fp8LinearCase c;
      c.dtype = dtype;
      c.rows = 19;
      c.out = 64;
      c.in = 144;
      c.scaling = Fp8InputScaling::kStatic;
      c.static_scale = static_scale;
      c.bias = true;
      RunFp8LinearCase(c, seed++, *gemm_);
    }
  }
}

TEST_F(Fp8LinearTest, NanInputRowGivesNanOutputsOnlyThere) {
  // The CPU makes a row with a NaN all NaN (its scale is NaN); the other
  // rows are untouched.
  const int64_t rows = 3, in = 32;
  std::vector<float> x(rows * in, 0.5f);
  x[1 * in + 5] = std::numeric_limits<float>::quiet_NaN();
  DeviceBuffer d_x(x.size() * 2), d_codes(x.size()), d_scales(rows * 4);
  d_x.Upload(Encode(ScalarType::kBF16, x));
  QuantizeFp8RowsParams p;
  p.x = d_x.get();
  p.x_row_stride = in;
  p.rows = rows;
  p.cols = in;
  p.codes = d_codes.as<uint8_t>();
  p.scales = d_scales.as<float>();
  PAGODA_ASSERT_CUDA_OK(LaunchQuantizeFp8Rows(p, nullptr));
  PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> scales = d_scales.Download<float>(rows);
  EXPECT_EQ(scales[0], 0.5f / kFp8E4M3Max);
  EXPECT_TRUE(std::isnan(scales[1]));
  EXPECT_EQ(scales[2], 0.5f / kFp8E4M3Max);
}

TEST_F(Fp8LinearTest, RejectsBadArguments) {
  QuantizeFp8RowsParams quantize;
  quantize.rows = 1;
  quantize.cols = 16;
  quantize.x_row_stride = 16;
  EXPECT_EQ(LaunchQuantizeFp8Rows(quantize, nullptr), cudaErrorInvalidValue);  // null buffers
  DeviceBuffer buffer(256);
  quantize.x = buffer.get();
  quantize.codes = buffer.as<uint8_t>();
  quantize.scales = buffer.as<float>();
  quantize.scaling = Fp8InputScaling::kStatic;
  quantize.static_scale = 0.0f;
  EXPECT_EQ(LaunchQuantizeFp8Rows(quantize, nullptr), cudaErrorInvalidValue);
  // cuBLASLt's FP8 GEMM needs m, k and n multiples of 16, f32 out, no bias.
  GemmParams product{.a = buffer.get(),
                     .w = buffer.get(),
                     .c = buffer.get(),
                     .m = 16,
                     .n = 16,
                     .k = 24,
                     .dtype = ScalarType::kFp8E4M3,
                     .out_dtype = ScalarType::kF32};
  EXPECT_EQ(Gemm(*gemm_, product, nullptr), CUBLAS_STATUS_INVALID_VALUE);
  product.k = 16;
  product.m = 7;
  EXPECT_EQ(Gemm(*gemm_, product, nullptr), CUBLAS_STATUS_INVALID_VALUE);
  product.m = 16;
  product.out_dtype = ScalarType::kBF16;
  EXPECT_EQ(Gemm(*gemm_, product, nullptr), CUBLAS_STATUS_INVALID_VALUE);
  // The scaled GEMM declines what its rule excludes, and refuses f32 out.
  Fp8ScaledGemmParams scaled{.a = buffer.as<uint8_t>(),
                             .w = buffer.as<uint8_t>(),
                             .row_scales = buffer.as<float>(),
                             .col_scales = buffer.as<float>(),
                             .c = buffer.get(),
                             .m = 7,
                             .n = 16,
                             .k = 16};
  EXPECT_EQ(Fp8ScaledGemm(*gemm_, scaled, nullptr), CUBLAS_STATUS_NOT_SUPPORTED);
  scaled.m = 16;
  scaled.out_dtype = ScalarType::kF32;
  EXPECT_EQ(Fp8ScaledGemm(*gemm_, scaled, nullptr), CUBLAS_STATUS_INVALID_VALUE);
}

}  // namespace
}  // namespace pagoda::kernels
