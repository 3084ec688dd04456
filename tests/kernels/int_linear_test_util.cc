#include "tests/kernels/int_linear_test_util.h"

#include <cmath>

namespace pagoda::kernels::testing {

HostIntWeight RandomWeight(const IntLinearCase& c, std::mt19937& rng) {
  HostIntWeight w;
  w.num_groups = (c.in + c.group_size - 1) / c.group_size;
  std::uniform_int_distribution<int> code(0, (1 << c.bits) - 1);
  std::uniform_real_distribution<float> scale(0.001f, 0.02f);
  w.codes.resize(c.out * c.in);
  for (uint8_t& q : w.codes) q = static_cast<uint8_t>(code(rng));
  w.scales.resize(c.out * w.num_groups);
  w.zeros.resize(c.out * w.num_groups);
  for (float& s : w.scales) s = scale(rng);
  for (float& z : w.zeros) z = static_cast<float>(code(rng));
  w.group_of_input.resize(c.in);
  for (int64_t i = 0; i < c.in; ++i) w.group_of_input[i] = static_cast<int32_t>(i / c.group_size);
  if (c.act_order) std::shuffle(w.group_of_input.begin(), w.group_of_input.end(), rng);
  return w;
}

namespace {

// y through the GEMV (rows <= kIntGemvMaxRows, inputs permuted first for
// act-order) or through the dequantized weight and the dense GEMM.
std::vector<float> RunDevice(const IntLinearCase& c, const PackedIntWeight& w,
                             const std::vector<float>& x, const std::vector<float>& bias,
                             GemmContext& gemm) {
  const size_t elem = ScalarTypeSize(c.dtype);
  DeviceBuffer d_x(x.size() * elem), d_sorted(x.size() * elem), d_bias(c.out * 4);
  DeviceBuffer d_w(c.out * c.in * elem), d_y(c.rows * c.out * elem), d_acc(c.rows * c.out * 4);
  d_x.Upload(Encode(c.dtype, x));
  d_bias.Upload(bias);
  d_y.Fill(0xFF);
  if (c.fused) {
    const IntGemmParams p{.weight = w,
                          .x = d_x.get(),
                          .bias = c.bias ? d_bias.as<float>() : nullptr,
                          .y = d_y.get(),
                          .dtype = c.dtype,
                          .rows = c.rows};
    EXPECT_EQ(LaunchFusedIntGemm(p, nullptr), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return Decode(c.dtype, d_y.Download<uint8_t>(c.rows * c.out * elem));
  }
  if (c.rows <= kIntGemvMaxRows) {
    const void* inputs = d_x.get();
    if (w.perm != nullptr) {
      EXPECT_EQ(
          LaunchPermuteIntInputs(d_x.get(), w.perm, c.rows, c.in, c.dtype, d_sorted.get(), nullptr),
          cudaSuccess);
      inputs = d_sorted.get();
    }
    IntGemvParams p{.weight = w,
                    .x = inputs,
                    .bias = c.bias ? d_bias.as<float>() : nullptr,
                    .y = d_y.get(),
                    .dtype = c.dtype,
                    .rows = static_cast<int>(c.rows)};
    EXPECT_EQ(LaunchIntGemv(p, nullptr), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return Decode(c.dtype, d_y.Download<uint8_t>(c.rows * c.out * elem));
  }
  EXPECT_EQ(LaunchDequantizeIntWeight(w, c.dtype, d_w.get(), nullptr), cudaSuccess);
  GemmParams product{.a = d_x.get(),
                     .w = d_w.get(),
                     .c = d_acc.get(),
                     .m = c.rows,
                     .n = c.out,
                     .k = c.in,
                     .dtype = c.dtype,
                     .out_dtype = ScalarType::kF32};
  EXPECT_EQ(Gemm(gemm, product, nullptr), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> y = d_acc.Download<float>(c.rows * c.out);
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t o = 0; o < c.out; ++o) y[r * c.out + o] += c.bias ? bias[o] : 0.0f;
  }
  return y;
}

}  // namespace

void RunIntLinearCase(const IntLinearCase& c, uint32_t seed, GemmContext& gemm) {
  SCOPED_TRACE(c.Name());
  std::mt19937 rng(seed);
  const HostIntWeight weight = RandomWeight(c, rng);
  std::string error;
  const HostPackedIntWeight packed = PackIntWeight(weight.View(c), &error);
  ASSERT_EQ(error, "");
  EXPECT_EQ(packed.perm.empty(), !c.act_order);
  const DeviceIntWeight device(packed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<float> x(c.rows * c.in), bias(c.out);
  for (float& v : x) v = unit(rng);
  for (float& v : bias) v = unit(rng);
  x = RoundTrip(c.dtype, x);
  const std::vector<float> y = RunDevice(c, device.View(c, packed), x, bias, gemm);

  // f32 sums (and, for the GEMM, weights rounded to dtype) against float64;
  // the GEMV's output and the GEMM path's weights round once to dtype.
  const bool gemv = c.rows <= kIntGemvMaxRows && !c.fused;
  const double rounding = Tolerance(c.dtype);
  int bad = 0;
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t o = 0; o < c.out; ++o) {
      double want = c.bias ? bias[o] : 0.0, magnitude = 0.0;
      for (int64_t i = 0; i < c.in; ++i) {
        const double term = x[r * c.in + i] * weight.Dequantized(c, o, i);
        want += term;
        magnitude += std::fabs(term);
      }
      // The fused GEMM rounds the weights (as the GEMM path) and the output.
      const double tolerance = std::ldexp(magnitude, -16) +
                               (gemv ? rounding * std::fabs(want) : rounding * magnitude) +
                               (c.fused ? rounding * std::fabs(want) : 0.0) + 1e-6;
      if (!(std::fabs(y[r * c.out + o] - want) <= tolerance) && ++bad <= 5) {
        ADD_FAILURE() << "y[" << r << ", " << o << "] = " << y[r * c.out + o] << ", want " << want;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

}  // namespace pagoda::kernels::testing
