// Every SIMD kernel, at every level this CPU runs, against a plain float64
// loop over odd sizes (tails of every width) and every stored dtype.

#include "worker/cpu/simd.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "common/fp8.h"
#include "gtest/gtest.h"
#include "worker/cpu/quant_tile_kernels.h"

namespace pagoda::worker {
namespace {

// The sampler's monotone float key (worker/gumbel_draw.h's OrderedFloatKey).
uint32_t OrderedKeyForTest(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

constexpr size_t kSizes[] = {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 65, 127, 129, 511, 1537};
// FP8 E4M3 is the KV cache's only, but every kernel has it (simd.h).
constexpr DType kDTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kFp8E4M3,
                             DType::kFp8E5M2};

// `n` values of `dtype` and their exact float values.
struct Stored {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
  const void* data(DType) const { return bytes.data(); }
};

// Uniform in [-2, 2) rounded to `dtype`; for FP8 every finite code instead
// (subnormals and the largest included), each equally likely.
Stored MakeStored(DType dtype, size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::uniform_int_distribution<int> code(0, 253);
  Stored s;
  s.values.resize(n);
  for (float& v : s.values) {
    if (dtype == DType::kFp8E4M3) {
      const int c = code(rng);
      v = Fp8E4M3ToFloat(static_cast<uint8_t>(c < 127 ? c : c + 1));  // Skips 0x7F, 0xFF.
    } else if (dtype == DType::kFp8E5M2) {
      const int c = code(rng) % 248;  // 0..0x7B and 0x80..0xFB: no infinity or NaN.
      v = Fp8E5M2ToFloat(static_cast<uint8_t>(c < 124 ? c : c + 4));
    } else {
      v = dist(rng);
    }
  }
  s.bytes.resize(n * DTypeSize(dtype) + 1);
  ConvertFromFloat(dtype, s.values.data(), n, s.bytes.data());
  ConvertToFloat(dtype, s.bytes.data(), n, s.values.data());
  return s;
}

std::vector<float> RandomFloats(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> out(n);
  for (float& v : out) v = dist(rng);
  return out;
}

// sum_i a[i] * b[i] in float64, and how far an f32 accumulation of the
// same terms may be from it: n * eps * sum |terms|.
struct Float64Dot {
  double value = 0.0;
  double tolerance = 0.0;
};

Float64Dot DotInFloat64(const float* a, const float* b, size_t n) {
  double value = 0.0, magnitude = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double term = static_cast<double>(a[i]) * b[i];
    value += term;
    magnitude += std::abs(term);
  }
  return {value, 1e-6 * (n + 1) * (magnitude + 1e-30) + 1e-7};
}

class SimdKernelTest : public testing::TestWithParam<SimdLevel> {};

TEST_P(SimdKernelTest, DotMatchesPlainLoop) {
  const SimdKernels& kernels = SimdKernelsFor(GetParam());
  std::mt19937 rng(7);
  for (DType dtype : kDTypes) {
    for (size_t n : kSizes) {
      const Stored a = MakeStored(dtype, n, rng);
      const std::vector<float> b = RandomFloats(n, rng);
      const Float64Dot want = DotInFloat64(a.values.data(), b.data(), n);
      const float got = kernels.dot(dtype)(a.data(dtype), b.data(), n);
      EXPECT_NEAR(got, want.value, want.tolerance)
          << SimdLevelName(GetParam()) << " " << DTypeName(dtype) << " n=" << n;
    }
  }
}

// Every key count around the four-key step, widths of every tail, one to
// four rows, strides honoured and guards between the score rows.
TEST_P(SimdKernelTest, Score4MatchesFloat64Dots) {
  const SimdKernels& kernels = SimdKernelsFor(GetParam());
  std::mt19937 rng(9);
  constexpr size_t kKeys[] = {0, 1, 3, 4, 5, 8, 16, 17};
  for (DType dtype : kDTypes) {
    for (size_t keys : kKeys) {
      for (size_t n : kSizes) {
        for (int rows = 1; rows <= 4; ++rows) {
          const size_t ld_x = n + 3, ld_q = n + 1, ld_s = keys + 2;
          const Stored x = MakeStored(dtype, keys * ld_x, rng);
          const std::vector<float> q = RandomFloats(rows * ld_q, rng);
          std::vector<float> s(4 * ld_s, 7.0f);
          kernels.score4(dtype)(x.data(dtype), ld_x, keys, n, q.data(), ld_q, rows, s.data(), ld_s);
          for (int r = 0; r < 4; ++r) {
            for (size_t j = 0; j < ld_s; ++j) {
              // Past the rows and keys: the guard value, untouched.
              const Float64Dot want = r < rows && j < keys
                                          ? DotInFloat64(&x.values[j * ld_x], &q[r * ld_q], n)
                                          : Float64Dot{7.0, 0.0};
              ASSERT_NEAR(s[r * ld_s + j], want.value, want.tolerance)
                  << SimdLevelName(GetParam()) << " " << DTypeName(dtype) << " keys=" << keys
                  << " n=" << n << " rows=" << rows << " at " << r << "," << j;
            }
          }
        }
      }
    }
  }
}

TEST_P(SimdKernelTest, Tile4MatchesPlainLoopsForEveryRowCount) {
  const SimdKernels& kernels = SimdKernelsFor(GetParam());
  std::mt19937 rng(19);
  for (DType dtype : kDTypes) {
    for (size_t n : kSizes) {
      // Four weight rows ld_w apart and token rows ld_x apart (strides
      // honoured); the outputs ld_y apart, with guards between them.
      const size_t ld_w = n + 5, ld_x = n + 3, ld_y = 7;
      const int max_rows = kernels.tile4_max_rows;
      const Stored w = MakeStored(dtype, 4 * ld_w, rng);
      const std::vector<float> x = RandomFloats(max_rows * ld_x, rng);
      for (int rows = 1; rows <= max_rows; ++rows) {
        std::vector<float> y(max_rows * ld_y, -7.0f);
        kernels.tile4(dtype)(w.data(dtype), ld_w, x.data(), ld_x, n, rows, y.data(), ld_y);
        for (int r = 0; r < max_rows; ++r) {
          for (size_t c = 0; c < ld_y; ++c) {
            if (r >= rows || c >= 4) {
              ASSERT_EQ(y[r * ld_y + c], -7.0f) << "wrote outside the tile, rows=" << rows;
              continue;
            }
            const Float64Dot want = DotInFloat64(&w.values[c * ld_w], &x[r * ld_x], n);
            EXPECT_NEAR(y[r * ld_y + c], want.value, want.tolerance)
                << SimdLevelName(GetParam()) << " " << DTypeName(dtype) << " n=" << n
                << " rows=" << rows << " r=" << r << " c=" << c;
          }
        }
      }
    }
  }
}

TEST_P(SimdKernelTest, WidenIsExact) {
  const SimdKernels& kernels = SimdKernelsFor(GetParam());
  std::mt19937 rng(13);
  for (DType dtype : kDTypes) {
    for (size_t n : kSizes) {
      const Stored a = MakeStored(dtype, n, rng);
      std::vector<float> out(n + 1, -7.0f);
      kernels.widen(dtype)(a.data(dtype), out.data(), n);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(out[i], a.values[i])
            << SimdLevelName(GetParam()) << " " << DTypeName(dtype) << " n=" << n << " i=" << i;
      }
      EXPECT_EQ(out[n], -7.0f) << "wrote past the end, n=" << n;
    }
  }
}

// Narrowing must round exactly as ConvertFromFloat (nearest even), so a KV
// cache written by any level holds the same bits. The values include ties,
// subnormals of either format, overflow to infinity (FP8: saturation to
// +-448 or +-57344), infinities and NaN.
TEST_P(SimdKernelTest, NarrowRoundsAsConvertFromFloat) {
  const SimdKernels& kernels = SimdKernelsFor(GetParam());
  std::mt19937 rng(17);
  const float specials[] = {
      0.0f,  -0.0f, 1.0f + 0x1p-8f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65504.0f, 65520.0f,
      1e-6f, 1e-8f, 3e-41f,         INFINITY,        -INFINITY,           NAN,      1e30f,
      -2.5f};
  for (DType dtype : kDTypes) {
    for (size_t n : kSizes) {
      std::vector<float> a = RandomFloats(n, rng);
      for (size_t i = 0; i < n; ++i) {
        if (i % 3 == 0) a[i] = specials[(i / 3) % std::size(specials)];
      }
      const size_t width = DTypeSize(dtype);
      std::vector<char> want(n * width), got(n * width + width, 0x5a);
      ConvertFromFloat(dtype, a.data(), n, want.data());
      kernels.narrow(dtype)(a.data(), got.data(), n);
      for (size_t i = 0; i < n * width; ++i) {
        ASSERT_EQ(got[i], want[i]) << SimdLevelName(GetParam()) << " " << DTypeName(dtype)
                                   << " n=" << n << " byte " << i << " value " << a[i / width];
      }
      for (size_t i = n * width; i < got.size(); ++i) {
        EXPECT_EQ(got[i], 0x5a) << "wrote past the end, n=" << n;
      }
    }
  }
}

// Keys and widths of every tail; one to four rows, and guard columns and
// rows around y.
TEST_P(SimdKernelTest, Weigh4MatchesPlainLoop) {
  const SimdKernels& kernels = SimdKernelsFor(GetParam());
  std::mt19937 rng(11);
  constexpr size_t kKeys[] = {0, 1, 5, 16, 17};
  constexpr size_t kWidths[] = {0, 1, 7, 8, 9, 15, 16, 17, 33, 63, 64, 65, 128, 129};
  for (DType dtype : kDTypes) {
    for (size_t keys : kKeys) {
      for (size_t n : kWidths) {
        for (int rows = 1; rows <= 4; ++rows) {
          const size_t ld_x = n + 3, ld_w = keys + 2, ld_y = n + 5;
          const Stored x = MakeStored(dtype, keys * ld_x, rng);
          const std::vector<float> w = RandomFloats(rows * ld_w, rng);
          std::vector<float> y = RandomFloats(4 * ld_y, rng);
          const std::vector<float> before = y;
          kernels.weigh4(dtype)(x.data(dtype), ld_x, keys, n, w.data(), ld_w, rows, y.data(), ld_y);
          for (int r = 0; r < 4; ++r) {
            for (size_t i = 0; i < ld_y; ++i) {
              double want = before[r * ld_y + i];
              double magnitude = std::abs(want);  // Of the terms: FP8 values reach 448.
              if (r < rows && i < n) {
                for (size_t j = 0; j < keys; ++j) {
                  const double term = static_cast<double>(w[r * ld_w + j]) * x.values[j * ld_x + i];
                  want += term;
                  magnitude += std::abs(term);
                }
              }
              ASSERT_NEAR(y[r * ld_y + i], want, (1 + keys) * std::max(1e-5, 2e-7 * magnitude))
                  << SimdLevelName(GetParam()) << " " << DTypeName(dtype) << " keys=" << keys
                  << " n=" << n << " rows=" << rows << " at " << r << "," << i;
            }
          }
        }
      }
    }
  }
}

TEST_P(SimdKernelTest, SiluMulMatchesPlainLoop) {
  const SimdKernels& kernels = SimdKernelsFor(GetParam());
  std::mt19937 rng(13);
  for (size_t n : kSizes) {
    // Gates from -120 to 120: both tails of the sigmoid and the exp range
    // clamps, besides the ordinary values near 0.
    std::vector<float> gate = RandomFloats(n, rng);
    for (size_t i = 0; i < n; ++i) gate[i] *= (i % 3 == 0) ? 240.0f : 8.0f;
    const std::vector<float> up = RandomFloats(n, rng);
    std::vector<float> out(n + 1, 7.0f);  // One guard element past n.
    kernels.silu_mul(gate.data(), up.data(), out.data(), n);
    for (size_t i = 0; i < n; ++i) {
      const double g = gate[i];
      const double expected = g / (1.0 + std::exp(-g)) * up[i];
      EXPECT_NEAR(out[i], expected, 1e-6 * std::abs(expected) + 1e-30)
          << SimdLevelName(GetParam()) << " n=" << n << " i=" << i << " gate=" << g;
    }
    EXPECT_EQ(out[n], 7.0f) << "wrote past the end, n=" << n;
  }
}

TEST_P(SimdKernelTest, Pack16TransposesAndZeroPads) {
  const SimdKernels& kernels = SimdKernelsFor(GetParam());
  if (kernels.gemm6x16 == nullptr) GTEST_SKIP() << "no panel kernels at this level";
  std::mt19937 rng(23);
  for (DType dtype : kDTypes) {
    for (size_t depth : {size_t{1}, size_t{7}, size_t{8}, size_t{17}, size_t{256}, size_t{259}}) {
      for (int cols : {1, 5, 8, 9, 16}) {
        const size_t ld_w = depth + 3;
        const Stored w = MakeStored(dtype, cols * ld_w, rng);
        std::vector<float> packed(depth * 16 + 1, -7.0f);
        kernels.pack16(dtype)(w.data(dtype), ld_w, cols, depth, packed.data());
        for (size_t k = 0; k < depth; ++k) {
          for (int c = 0; c < 16; ++c) {
            const float want = c < cols ? w.values[c * ld_w + k] : 0.0f;
            ASSERT_EQ(packed[k * 16 + c], want) << DTypeName(dtype) << " depth=" << depth
                                                << " cols=" << cols << " k=" << k << " c=" << c;
          }
        }
        ASSERT_EQ(packed[depth * 16], -7.0f) << "wrote past the panel";
      }
    }
  }
}

TEST_P(SimdKernelTest, Gemm6x16MatchesFloat64ForEveryTileShape) {
  const SimdKernels& kernels = SimdKernelsFor(GetParam());
  if (kernels.gemm6x16 == nullptr) GTEST_SKIP() << "no panel kernels at this level";
  std::mt19937 rng(29);
  for (size_t depth : {size_t{0}, size_t{1}, size_t{9}, size_t{64}, size_t{257}}) {
    for (size_t ld_panel : {size_t{16}, size_t{21}}) {
      const std::vector<float> panel = RandomFloats(std::max<size_t>(1, depth) * ld_panel, rng);
      const size_t ld_x = depth + 2, ld_y = 19;
      const std::vector<float> x = RandomFloats(6 * ld_x, rng);
      for (int rows = 1; rows <= 6; ++rows) {
        for (int cols : {1, 7, 8, 15, 16}) {
          for (bool accumulate : {false, true}) {
            std::vector<float> y = RandomFloats(6 * ld_y, rng);
            const std::vector<float> before = y;
            kernels.gemm6x16(panel.data(), ld_panel, depth, x.data(), ld_x, rows, y.data(), ld_y,
                             cols, accumulate);
            for (int r = 0; r < 6; ++r) {
              for (size_t c = 0; c < ld_y; ++c) {
                const size_t at = r * ld_y + c;
                if (r >= rows || static_cast<int>(c) >= cols) {
                  ASSERT_EQ(y[at], before[at]) << "wrote outside the tile";
                  continue;
                }
                double want = accumulate ? before[at] : 0.0;
                for (size_t k = 0; k < depth; ++k) {
                  want += static_cast<double>(x[r * ld_x + k]) * panel[k * ld_panel + c];
                }
                ASSERT_NEAR(y[at], want, 1e-5 * (depth + 1))
                    << "depth=" << depth << " rows=" << rows << " cols=" << cols << " r=" << r;
              }
            }
          }
        }
      }
    }
  }
}

TEST_P(SimdKernelTest, ExpSumMatchesStdExpAndZeroesMinusInfinity) {
  const SimdKernels& kernels = SimdKernelsFor(GetParam());
  std::mt19937 rng(31);
  for (size_t n : kSizes) {
    std::vector<float> in = RandomFloats(n, rng);
    for (size_t i = 0; i < n; ++i) {
      if (i % 5 == 0) in[i] *= 40.0f;     // Far into both tails, past underflow.
      if (i % 7 == 3) in[i] = -INFINITY;  // A masked score.
    }
    const float shift = 1.5f;
    std::vector<float> out(n + 1, -7.0f);
    const float sum = kernels.exp_sum(in.data(), shift, out.data(), n);
    double want_sum = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const float argument = in[i] - shift;  // Rounded as the kernels round it.
      const double want = std::exp(static_cast<double>(argument));
      want_sum += want;
      if (std::isinf(in[i])) {
        ASSERT_EQ(out[i], 0.0f) << "n=" << n << " i=" << i;
      } else {
        ASSERT_NEAR(out[i], want, 1e-6 * want + 1e-37) << "n=" << n << " x=" << in[i];
      }
    }
    EXPECT_NEAR(sum, want_sum, 1e-5 * want_sum + 1e-30) << SimdLevelName(GetParam()) << " n=" << n;
    EXPECT_EQ(out[n], -7.0f) << "wrote past the end, n=" << n;
  }
}

// The float64 gap between `want` and the next value away from zero: 1 ulp,
// subnormals included.
double UlpOf(double want) { return std::nextafter(std::abs(want), INFINITY) - std::abs(want); }

// e^(x - shift) as the kernels take it: x rounded to float, the difference
// in float64 (exact for the arguments below).
double StdExpOf(float x, float shift) {
  return std::isnan(x) ? 0.0 : std::exp(static_cast<double>(x) - shift);
}

// Arguments for the exp: the specials, both ends of the range (the lowest
// normal results, subnormal ones, underflow to 0, overflow to inf), and
// floats on both sides of the reduction's breakpoints (k + 1/2) ln2, where
// n changes.
std::vector<float> ExpArguments() {
  std::vector<float> x = {-INFINITY, NAN,     -NAN,       -3.4e38f,  -1e30f,   -1e4f,   -800.0f,
                          -750.0f,   -746.0f, -745.2f,    -745.1f,   -745.0f,  -744.0f, -720.0f,
                          -709.0f,   -708.4f, -708.3964f, -708.396f, -708.39f, -708.3f, -100.0f,
                          -20.0f,    -1.0f,   -1e-30f,    -0.0f,     0.0f,     1e-30f,  1.0f,
                          88.0f,     700.0f,  709.7f,     709.8f,    710.0f,   1e4f,    INFINITY};
  for (int k = -1077; k <= 1024; ++k) {
    const float breakpoint = static_cast<float>((k + 0.5) * 0.69314718055994531);
    float below = breakpoint, above = breakpoint;
    for (int step = 0; step < 3; ++step) {
      below = std::nextafter(below, -INFINITY);
      above = std::nextafter(above, INFINITY);
      x.push_back(below);
      x.push_back(above);
    }
    x.push_back(breakpoint);
  }
  for (int i = 0; i <= 20000; ++i) x.push_back(-746.0f + i * 0.0373f);  // Dense over the range.
  return x;
}

// e^-708.396, just above the smallest normal float64: the vector levels'
// terms below it are 0, never subnormal (simd_exp_f64.cc).
constexpr double kExpSumF64FlushedBelow = 2.2261e-308;

TEST_P(SimdKernelTest, ExpSumF64TermsAreWithinOneUlpOfStdExp) {
  const SimdKernels& kernels = SimdKernelsFor(GetParam());
  for (float shift : {0.0f, 3.25f, -17.5f}) {
    for (float x : ExpArguments()) {
      const double want = StdExpOf(x, shift);
      const double got = kernels.exp_sum_f64(&x, shift, 1);
      if (std::isinf(want)) {
        ASSERT_EQ(got, want) << SimdLevelName(GetParam()) << " x=" << x << " shift=" << shift;
      } else if (want < kExpSumF64FlushedBelow) {
        ASSERT_TRUE(got == 0.0 || std::abs(got - want) <= UlpOf(want))
            << SimdLevelName(GetParam()) << " x=" << x << " shift=" << shift << " got=" << got;
      } else {
        ASSERT_LE(std::abs(got - want), UlpOf(want))
            << SimdLevelName(GetParam()) << " x=" << x << " shift=" << shift << " want=" << want;
      }
    }
  }
}

// Every lane and tail position of the vector loops: one finite value among
// -inf and NaN gives its own exp; and a row of many terms sums to the
// float64 sum within its rounding.
TEST_P(SimdKernelTest, ExpSumF64CountsEveryPositionOnce) {
  const SimdKernels& kernels = SimdKernelsFor(GetParam());
  std::mt19937 rng(47);
  std::normal_distribution<float> logit(0.0f, 4.0f);
  for (size_t n : kSizes) {
    std::vector<float> in(n + 1, -INFINITY);
    for (size_t i = 0; i < n; i += 2) in[i] = NAN;
    for (size_t j = 0; j < n; ++j) {
      const float saved = in[j];
      in[j] = -1.0f - 0.01f * j;
      const double got = kernels.exp_sum_f64(in.data(), 0.25f, n);
      ASSERT_LE(std::abs(got - StdExpOf(in[j], 0.25f)), UlpOf(got)) << "n=" << n << " j=" << j;
      in[j] = saved;
    }
    in[n] = 1e30f;  // Past the end: must not count.
    double want = 0.0;
    for (size_t i = 0; i < n; ++i) {
      in[i] = i % 9 == 4 ? NAN : i % 7 == 3 ? -INFINITY : logit(rng);
      want += StdExpOf(in[i], 12.0f);
    }
    const double got = kernels.exp_sum_f64(in.data(), 12.0f, n);
    EXPECT_NEAR(got, want, 4e-16 * (n + 2) * want) << SimdLevelName(GetParam()) << " n=" << n;
  }
}

// The argmax against a plain loop of its own, at every size and tail: the
// maximum placed at each position among -inf, NaN and lower values; ties
// of it further on, in other lanes and accumulators, lose to the first; a
// row of only -inf and NaN gives -inf at 0; +inf wins.
TEST_P(SimdKernelTest, ArgMaxIsTheFirstLargestAndNanIsMinusInfinity) {
  const SimdKernels& kernels = SimdKernelsFor(GetParam());
  std::mt19937 rng(48);
  std::normal_distribution<float> logit(0.0f, 3.0f);
  auto expect_argmax = [&](const std::vector<float>& in, size_t n, size_t want_id,
                           float want_value) {
    float value = 0.0f;
    const size_t id = kernels.argmax(in.data(), n, &value);
    ASSERT_EQ(id, want_id) << SimdLevelName(GetParam()) << " n=" << n;
    ASSERT_EQ(value, want_value) << SimdLevelName(GetParam()) << " n=" << n;
  };
  for (size_t n : kSizes) {
    std::vector<float> in(n + 1);
    for (size_t i = 0; i < n; ++i) in[i] = i % 3 == 0 ? NAN : i % 3 == 1 ? -INFINITY : -5.0f;
    in[n] = 1e30f;  // Past the end: never read as a candidate.
    expect_argmax(in, n, n > 2 ? 2 : 0, n > 2 ? -5.0f : -INFINITY);
    for (size_t i = 0; i < n; ++i) in[i] = i % 2 == 0 ? NAN : -INFINITY;
    expect_argmax(in, n, 0, -INFINITY);
    for (size_t i = 0; i < n; ++i) in[i] = i % 7 == 3 ? NAN : logit(rng);
    for (size_t at = 0; at < n; at += 1 + at / 8) {
      std::vector<float> row = in;
      row[at] = 20.0f;
      for (size_t tie = at + 5; tie < n; tie += 17) row[tie] = 20.0f;
      expect_argmax(row, n, at, 20.0f);
      row[n - 1] = INFINITY;
      expect_argmax(row, n, n - 1, INFINITY);
    }
  }
}

// The Gumbel-max candidate scan against the plain loop. Each bound table
// below passes a token iff one bit of its Philox word's top 12 is set, so
// the twelve tables read every word's top 12 bits back through the ids: a
// wrong lane, counter, carry or transpose in the vector Philox shows. Then
// the real-looking case: increasing bounds, NaN, +-inf, a min_key and a
// best score that about a third of the tokens reach.
TEST_P(SimdKernelTest, GumbelCandidatesAreThePlainLoops) {
  const SimdKernels& kernels = SimdKernelsFor(GetParam());
  const SimdKernels& plain = SimdKernelsFor(SimdLevel::kPlain);
  std::mt19937 rng(46);
  std::normal_distribution<float> logit(0.0f, 3.0f);
  std::vector<float> bounds(4096);
  for (size_t n : kSizes) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) {
      x[i] = i % 11 == 5 ? NAN : i % 13 == 7 ? -INFINITY : i % 29 == 3 ? INFINITY : logit(rng);
    }
    // Counters across 2^32 (the carry into the high word), and a 64-bit stream.
    for (uint64_t first : {uint64_t{0}, uint64_t{4} * (uint64_t{1} << 32) - 12}) {
      GumbelScan scan = {.bounds = bounds.data(),
                         .largest_bound = 1e30f,
                         .seed = 0x0123456789abcdefull,
                         .stream = 0xfedcba9876543210ull + n,
                         .min_key = 0,
                         .max_logit = 0.0f,
                         .inv_t = 1.0f,
                         .best_score = 0.0f};
      std::vector<uint32_t> want(n + 1), got(n + 1);
      auto expect_same = [&](const char* what) {
        const size_t want_count = plain.gumbel_candidates(x.data(), n, first, scan, want.data());
        const size_t got_count = kernels.gumbel_candidates(x.data(), n, first, scan, got.data());
        ASSERT_EQ(got_count, want_count) << SimdLevelName(GetParam()) << " n=" << n << " " << what;
        for (size_t c = 0; c < want_count; ++c) {
          ASSERT_EQ(got[c], want[c]) << SimdLevelName(GetParam()) << " n=" << n << " " << what;
        }
      };
      for (int bit = 0; bit < 12; ++bit) {
        for (size_t b = 0; b < bounds.size(); ++b) bounds[b] = (b >> bit) & 1 ? 1e30f : -1e30f;
        expect_same("bit");
      }
      for (size_t b = 0; b < bounds.size(); ++b) bounds[b] = -3.0f + 20.0f * b / bounds.size();
      scan = {.bounds = bounds.data(),
              .largest_bound = bounds.back(),
              .seed = 99,
              .stream = 5,
              .min_key = OrderedKeyForTest(-2.0f),
              .max_logit = 9.5f,
              .inv_t = 0.8f,
              .best_score = 1.5f};
      expect_same("bounds");
      // Most blocks out of reach (the skip without Philox), a few tokens
      // near the maximum in reach, one NaN beside each (the block's max).
      std::vector<float> spread = x;
      for (size_t i = 0; i < n; ++i) {
        if (i % 97 == 40) spread[i] = 38.0f + 0.01f * i;
        if (i % 97 == 41 || i % 97 == 39) spread[i] = NAN;
      }
      std::swap(x, spread);
      scan.max_logit = 40.0f;
      scan.inv_t = 1.0f;
      scan.min_key = 0;
      expect_same("out of reach");
      std::swap(x, spread);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, SimdKernelTest, testing::ValuesIn(SupportedSimdLevels()),
                         [](const testing::TestParamInfo<SimdLevel>& info) {
                           return std::string(SimdLevelName(info.param));
                         });

TEST(SimdLevelTest, PlainIsAlwaysSupportedAndBestIsLast) {
  const std::vector<SimdLevel> levels = SupportedSimdLevels();
  ASSERT_FALSE(levels.empty());
  EXPECT_EQ(levels.front(), SimdLevel::kPlain);
  EXPECT_EQ(levels.back(), BestSimdLevel());
}

// Where the CPU is known (tests/cpu_emulation runs this binary under QEMU
// as a Haswell, AVX2 without AVX-512 or VNNI, and as a Nehalem, SSE4.2
// only), the level and int8 kernels CPUID detection picked for it: that the
// kernels passed there proves nothing if the dispatch picked another level.
TEST(SimdLevelTest, DetectionPicksTheExpectedKernels) {
  const char* level = std::getenv("PAGODA_EXPECT_SIMD_LEVEL");
  const char* int8 = std::getenv("PAGODA_EXPECT_INT8_KERNELS");
  if (level == nullptr && int8 == nullptr) GTEST_SKIP() << "no expected CPU given";
  if (level != nullptr) {
    EXPECT_EQ(SimdLevelName(BestSimdLevel()), level);
  }
  if (int8 != nullptr) {
    EXPECT_EQ(Int8KernelsName(BestSimdLevel()), int8);
  }
}

}  // namespace
}  // namespace pagoda::worker
