// The float64 exp-sums of the CPU kernels (SimdKernels::exp_sum_f64) at each
// level: the log-sum-exp under the sampler's and the prompt's logprobs. The
// plain level is std::exp in a loop; the vector levels evaluate e^d in
// float64 with an exp of their own: d = n ln2 + r with |r| <= ln2 / 2 (ln2
// split in two, so the reduction is exact to about 2^-53 |r|), e^r by its
// Taylor polynomial of degree 13 (truncation error r^14 / 14! e^|r|, below
// 6e-18 relative), times 2^n. Each term is within 0.88 float64 ulp of e^d
// (at most 0.866 against long double expl over 2 million float arguments in
// [-708.38, 1]; glibc's std::exp 0.507), and within 1 ulp of std::exp's up
// to inf, but that those below 2.2261e-308 are 0 (simd_test), so the sums
// differ from the plain loop's only by those ulps and the order of their
// additions.

#include <immintrin.h>

// GCC 12 warns inside its own AVX-512 headers (the _mm512_undefined_* values
// the extraction intrinsics start from), as in simd_avx512.cc.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <array>
#include <cmath>
#include <cstddef>

#include "worker/cpu/simd_levels.h"

#define PAGODA_EXP_F64_AVX2 __attribute__((target("avx2,fma")))
#define PAGODA_EXP_F64_AVX512 __attribute__((target("avx512f,avx2,fma")))

namespace pagoda::worker::simd_internal {
namespace {

// Arguments are clamped to [kExpF64Lowest, kExpF64Highest], and those below
// kExpF64Lowest (-inf and NaN included) give 0: e^-708.396 is just above
// the smallest normal float64 (2.2251e-308), so no lane ever makes a
// subnormal (a microcode assist each: with a quarter of a row's tokens at
// -inf, the row took 2 to 2.8 times as long); what is lost is below
// 2.2261e-308, beside a maximum term of 1. e^710 is inf, as std::exp's.
constexpr double kExpF64Lowest = -708.396;
constexpr double kExpF64Highest = 710.0;
constexpr double kExpF64Log2E = 1.4426950408889634;
constexpr double kExpF64Ln2Hi = 0x1.62e42fefa39efp-1;   // ln2 rounded to float64,
constexpr double kExpF64Ln2Lo = 0x1.abc9e3b39803fp-56;  // and what that left out.
constexpr int kExpF64Degree = 13;

// 1 / k! for k <= kExpF64Degree, computed at compile time (a loop over
// them at run time would divide in every lane group).
constexpr std::array<double, kExpF64Degree + 1> ExpF64TaylorCoefficients() {
  std::array<double, kExpF64Degree + 1> c{};
  double factorial = 1.0;
  for (int k = 0; k <= kExpF64Degree; ++k) {
    if (k > 1) factorial *= k;
    c[k] = 1.0 / factorial;
  }
  return c;
}
constexpr std::array<double, kExpF64Degree + 1> kExpF64Taylor = ExpF64TaylorCoefficients();

// Masked-off and padding lanes are -inf, which gives 0.
float ExpF64LoadLogit(float x) { return std::isnan(x) ? -INFINITY : x; }

// Lanes below kExpF64Lowest, or NaN (an ordered compare is false), give 0.
PAGODA_EXP_F64_AVX512 inline __m512d ExpF64x8Avx512(__m512d d) {
  const __mmask8 normal = _mm512_cmp_pd_mask(d, _mm512_set1_pd(kExpF64Lowest), _CMP_GE_OQ);
  d = _mm512_max_pd(d, _mm512_set1_pd(kExpF64Lowest));  // NaN: the bound (second operand).
  d = _mm512_min_pd(d, _mm512_set1_pd(kExpF64Highest));
  const __m512d n = _mm512_roundscale_pd(_mm512_mul_pd(d, _mm512_set1_pd(kExpF64Log2E)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512d r = _mm512_fnmadd_pd(n, _mm512_set1_pd(kExpF64Ln2Hi), d);
  r = _mm512_fnmadd_pd(n, _mm512_set1_pd(kExpF64Ln2Lo), r);
  __m512d p = _mm512_set1_pd(kExpF64Taylor[kExpF64Degree]);
#pragma GCC unroll 16  // A straight chain of FMAs, not a loop of branches.
  for (int k = kExpF64Degree - 1; k >= 0; --k) {
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(kExpF64Taylor[k]));
  }
  return _mm512_maskz_scalef_pd(normal, p, n);
}

// e^(in - shift) of 16 floats, added to two accumulators.
PAGODA_EXP_F64_AVX512 inline void AddExpF64x16Avx512(__m512 in, __m512d shift, __m512d& acc0,
                                                     __m512d& acc1) {
  const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(in));
  const __m512d hi =
      _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(in), 1)));
  acc0 = _mm512_add_pd(acc0, ExpF64x8Avx512(_mm512_sub_pd(lo, shift)));
  acc1 = _mm512_add_pd(acc1, ExpF64x8Avx512(_mm512_sub_pd(hi, shift)));
}

// 2^k for integral k in [-1022, 1023], built in the exponent bits: k + 1023
// lands in the low mantissa bits of k + 1.5 * 2^52 + 1023.
PAGODA_EXP_F64_AVX2 inline __m256d ExpF64TwoToAvx2(__m256d k) {
  const __m256d biased = _mm256_add_pd(k, _mm256_set1_pd(0x1.8p52 + 1023));
  return _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_castpd_si256(biased), 52));
}

PAGODA_EXP_F64_AVX2 inline __m256d ExpF64x4Avx2(__m256d d) {
  const __m256d normal = _mm256_cmp_pd(d, _mm256_set1_pd(kExpF64Lowest), _CMP_GE_OQ);
  d = _mm256_max_pd(d, _mm256_set1_pd(kExpF64Lowest));  // NaN: as at AVX-512.
  d = _mm256_min_pd(d, _mm256_set1_pd(kExpF64Highest));
  const __m256d n = _mm256_round_pd(_mm256_mul_pd(d, _mm256_set1_pd(kExpF64Log2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256d r = _mm256_fnmadd_pd(n, _mm256_set1_pd(kExpF64Ln2Hi), d);
  r = _mm256_fnmadd_pd(n, _mm256_set1_pd(kExpF64Ln2Lo), r);
  __m256d p = _mm256_set1_pd(kExpF64Taylor[kExpF64Degree]);
#pragma GCC unroll 16  // A straight chain of FMAs, not a loop of branches.
  for (int k = kExpF64Degree - 1; k >= 0; --k) {
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(kExpF64Taylor[k]));
  }
  // 2^n as 2^n1 * 2^n2, each a normal float64 for n in [-1022, 1024] (2^1024
  // is not, and e^709.5 is finite): the first product is exact, the second
  // rounds once (to inf where e^d is), as scalef does.
  const __m256d n1 = _mm256_floor_pd(_mm256_mul_pd(n, _mm256_set1_pd(0.5)));
  const __m256d n2 = _mm256_sub_pd(n, n1);
  const __m256d e = _mm256_mul_pd(_mm256_mul_pd(p, ExpF64TwoToAvx2(n1)), ExpF64TwoToAvx2(n2));
  return _mm256_and_pd(e, normal);
}

// e^(in - shift) of 8 floats, added to two accumulators.
PAGODA_EXP_F64_AVX2 inline void AddExpF64x8Avx2(const float* in, __m256d shift, __m256d& acc0,
                                                __m256d& acc1) {
  const __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(in));
  const __m256d hi = _mm256_cvtps_pd(_mm_loadu_ps(in + 4));
  acc0 = _mm256_add_pd(acc0, ExpF64x4Avx2(_mm256_sub_pd(lo, shift)));
  acc1 = _mm256_add_pd(acc1, ExpF64x4Avx2(_mm256_sub_pd(hi, shift)));
}

}  // namespace

double ExpSumF64Plain(const float* in, float shift, size_t n) {
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    sum += std::exp(static_cast<double>(ExpF64LoadLogit(in[i])) - shift);
  }
  return sum;
}

PAGODA_EXP_F64_AVX2 double ExpSumF64Avx2(const float* in, float shift, size_t n) {
  const __m256d shift_v = _mm256_set1_pd(shift);
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) AddExpF64x8Avx2(in + i, shift_v, acc0, acc1);
  if (i < n) {  // The tail, padded with -inf (which gives 0).
    float tail[8];
    for (size_t k = 0; k < 8; ++k) tail[k] = i + k < n ? in[i + k] : -INFINITY;
    AddExpF64x8Avx2(tail, shift_v, acc0, acc1);
  }
  const __m256d sum4 = _mm256_add_pd(acc0, acc1);
  const __m128d sum2 = _mm_add_pd(_mm256_castpd256_pd128(sum4), _mm256_extractf128_pd(sum4, 1));
  return _mm_cvtsd_f64(_mm_add_sd(sum2, _mm_unpackhi_pd(sum2, sum2)));
}

PAGODA_EXP_F64_AVX512 double ExpSumF64Avx512(const float* in, float shift, size_t n) {
  const __m512d shift_v = _mm512_set1_pd(shift);
  __m512d acc0 = _mm512_setzero_pd(), acc1 = _mm512_setzero_pd();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) AddExpF64x16Avx512(_mm512_loadu_ps(in + i), shift_v, acc0, acc1);
  if (i < n) {  // The tail through a masked load: -inf in the other lanes.
    const __mmask16 valid = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 tail = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), valid, in + i);
    AddExpF64x16Avx512(tail, shift_v, acc0, acc1);
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(acc0, acc1));
}

}  // namespace pagoda::worker::simd_internal
