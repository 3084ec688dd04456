#ifndef PAGODA_WORKER_CPU_SIMD_H_
#define PAGODA_WORKER_CPU_SIMD_H_

// The CPU kernels' inner loops (dot products, attention scores and weighted
// sums, linear tiles, dtype widening and narrowing, weight packing) at each
// instruction-set level, chosen at run time: the plain loop is the reference
// the SIMD ones are tested against.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include "common/dtype.h"

namespace pagoda::worker {

// Instruction-set levels of the CPU kernels, chosen at run time (the binaries
// are built for plain x86-64 and never with -march=native).
enum class SimdLevel { kPlain, kAvx2, kAvx512 };

std::string_view SimdLevelName(SimdLevel level);
// Every level this CPU runs, plain first, best last.
std::vector<SimdLevel> SupportedSimdLevels();
SimdLevel BestSimdLevel();

// One Gumbel-max scan's parameters (SimdKernels::gumbel_candidates).
inline constexpr int kGumbelScanBoundShift = 20;
struct GumbelScan {
  // 4096 noise bounds, by the Philox word's top 12 bits (the word >> 20).
  const float* bounds;
  // The largest of the bounds: the vector levels skip the Philox of a block
  // of tokens none of whose logits could reach best_score with it.
  float largest_bound;
  uint64_t seed;
  uint64_t stream;
  uint32_t min_key;
  float max_logit;
  float inv_t;
  float best_score;
};

// The inner loops of the CPU backend at one level. Every function accumulates
// in f32 whatever the stored type, and accepts any n >= 0 (no alignment or
// multiple-of-width requirement). `w` pointers point at `n` elements of the
// table's weight dtype (f32, or the uint16 bit patterns of f16 / bf16, or
// the bytes of FP8 E4M3 or E5M2: the KV cache's only, but every kernel has
// them so that the attention paths and the tests treat every cache dtype
// alike; codes widen to their exact values, but an E4M3 NaN code at the
// vector levels, which gives +-480).
struct SimdKernels {
  // sum_i a[i] * b[i], a of the kernel's weight dtype, b f32.
  float (*dot_f32)(const void* a, const float* b, size_t n);
  float (*dot_bf16)(const void* a, const float* b, size_t n);
  float (*dot_f16)(const void* a, const float* b, size_t n);
  float (*dot_fp8e4m3)(const void* a, const float* b, size_t n);
  float (*dot_fp8e5m2)(const void* a, const float* b, size_t n);
  // s[r * ld_s + j] = sum_i x[j * ld_x + i] * q[r * ld_q + i] for r < rows
  // (1..4), j < keys, i < n, x of the kernel's dtype: attention's scores of
  // `keys` rows of K for up to four query heads. Each load (and widening)
  // of x serves every head, each query load several keys.
  void (*score4_f32)(const void* x, size_t ld_x, size_t keys, size_t n, const float* q, size_t ld_q,
                     int rows, float* s, size_t ld_s);
  void (*score4_bf16)(const void* x, size_t ld_x, size_t keys, size_t n, const float* q,
                      size_t ld_q, int rows, float* s, size_t ld_s);
  void (*score4_f16)(const void* x, size_t ld_x, size_t keys, size_t n, const float* q, size_t ld_q,
                     int rows, float* s, size_t ld_s);
  void (*score4_fp8e4m3)(const void* x, size_t ld_x, size_t keys, size_t n, const float* q,
                         size_t ld_q, int rows, float* s, size_t ld_s);
  void (*score4_fp8e5m2)(const void* x, size_t ld_x, size_t keys, size_t n, const float* q,
                         size_t ld_q, int rows, float* s, size_t ld_s);
  // y[r * ld_y + c] = sum_i w[c * ld_w + i] * x[r * ld_x + i] for r < rows,
  // c < 4, rows in [1, tile4_max_rows]: a 4-output-feature by `rows`-token tile of a
  // Linear, `w` four weight rows `ld_w` elements apart. Each weight load is
  // shared by every token row and each token load by the four weight rows.
  void (*tile4_f32)(const void* w, size_t ld_w, const float* x, size_t ld_x, size_t n, int rows,
                    float* y, size_t ld_y);
  void (*tile4_bf16)(const void* w, size_t ld_w, const float* x, size_t ld_x, size_t n, int rows,
                     float* y, size_t ld_y);
  void (*tile4_f16)(const void* w, size_t ld_w, const float* x, size_t ld_x, size_t n, int rows,
                    float* y, size_t ld_y);
  void (*tile4_fp8e4m3)(const void* w, size_t ld_w, const float* x, size_t ld_x, size_t n, int rows,
                        float* y, size_t ld_y);
  void (*tile4_fp8e5m2)(const void* w, size_t ld_w, const float* x, size_t ld_x, size_t n, int rows,
                        float* y, size_t ld_y);
  // out[i] = float(a[i]): a weight tile widened for an f32 GEMM.
  void (*widen_f32)(const void* a, float* out, size_t n);
  void (*widen_bf16)(const void* a, float* out, size_t n);
  void (*widen_f16)(const void* a, float* out, size_t n);
  void (*widen_fp8e4m3)(const void* a, float* out, size_t n);
  void (*widen_fp8e5m2)(const void* a, float* out, size_t n);
  // out[i] = a[i] rounded to the kernel's dtype (nearest even, as
  // ConvertFromFloat): K/V rows written into a 16-bit or FP8 KV cache
  // (FP8: E4M3 saturated to +-448, E5M2 to +-57344, a scalar loop at every
  // level: one row a token and layer is no hot path).
  void (*narrow_f32)(const float* a, void* out, size_t n);
  void (*narrow_bf16)(const float* a, void* out, size_t n);
  void (*narrow_f16)(const float* a, void* out, size_t n);
  void (*narrow_fp8e4m3)(const float* a, void* out, size_t n);
  void (*narrow_fp8e5m2)(const float* a, void* out, size_t n);
  // y[r * ld_y + i] += sum_j w[r * ld_w + j] * x[j * ld_x + i] for r < rows
  // (1..4), i < n, j < keys, x of the kernel's dtype: attention's values
  // (`keys` rows of V, `n` wide) weighted for up to four query heads. Each
  // load (and widening) of x serves every head, and the sums stay in
  // registers across the keys.
  void (*weigh4_f32)(const void* x, size_t ld_x, size_t keys, size_t n, const float* w, size_t ld_w,
                     int rows, float* y, size_t ld_y);
  void (*weigh4_bf16)(const void* x, size_t ld_x, size_t keys, size_t n, const float* w,
                      size_t ld_w, int rows, float* y, size_t ld_y);
  void (*weigh4_f16)(const void* x, size_t ld_x, size_t keys, size_t n, const float* w, size_t ld_w,
                     int rows, float* y, size_t ld_y);
  void (*weigh4_fp8e4m3)(const void* x, size_t ld_x, size_t keys, size_t n, const float* w,
                         size_t ld_w, int rows, float* y, size_t ld_y);
  void (*weigh4_fp8e5m2)(const void* x, size_t ld_x, size_t keys, size_t n, const float* w,
                         size_t ld_w, int rows, float* y, size_t ld_y);

  // The panel kernels of a blocked matrix product (prefill, attention over
  // many queries); null at a level that has none (plain), where callers keep
  // to tile4 and attention goes row by row. Where they pay is per level
  // (panel_linear_below_in_features, blocked_attention_min_rows below).
  //
  // packed[k * 16 + c] = float(w[c * ld_w + k]) for k < depth, c < cols,
  // and 0 for cols <= c < 16: `cols` (1..16) weight rows of the table's dtype
  // transposed into a depth-major panel of 16 columns.
  void (*pack16_f32)(const void* w, size_t ld_w, int cols, size_t depth, float* packed);
  void (*pack16_bf16)(const void* w, size_t ld_w, int cols, size_t depth, float* packed);
  void (*pack16_f16)(const void* w, size_t ld_w, int cols, size_t depth, float* packed);
  void (*pack16_fp8e4m3)(const void* w, size_t ld_w, int cols, size_t depth, float* packed);
  void (*pack16_fp8e5m2)(const void* w, size_t ld_w, int cols, size_t depth, float* packed);
  // y[r * ld_y + c] (+)= sum_k x[r * ld_x + k] * panel[k * ld_panel + c] for
  // r < rows (1..6), c < cols (1..16), k < depth; `accumulate` adds to y,
  // else overwrites it. REQUIRES: the panel's 16 columns are readable for
  // every k (columns past `cols` may hold anything).
  void (*gemm6x16)(const float* panel, size_t ld_panel, size_t depth, const float* x, size_t ld_x,
                   int rows, float* y, size_t ld_y, int cols, bool accumulate);

  // out[i] = e^(in[i] - shift), returning their sum: a softmax row's
  // weights (in[i] = -inf gives exactly 0). Vector levels as silu_mul's exp.
  // out may alias in.
  float (*exp_sum)(const float* in, float shift, float* out, size_t n);

  // out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + e^-g): the MLP's
  // gate. Vector levels use an exp accurate to a few ulp (not bit-identical
  // to std::exp); out may alias neither input.
  void (*silu_mul)(const float* gate, const float* up, float* out, size_t n);

  // sum_i e^(double(in[i]) - shift) in float64, a NaN in[i] counting as
  // -inf (0): the sum under a log-sum-exp (the sampler's and the prompt's
  // logprobs), shift a row's finite maximum. Every level's terms are within
  // 1 float64 ulp of std::exp's, but that the vector levels give 0 below
  // 2.2261e-308 (simd_exp_f64.cc); only the order of the additions differs,
  // so logprobs rounded to f32 match the plain loop's.
  double (*exp_sum_f64)(const float* in, float shift, size_t n);

  // The index of the largest in[i], i < n, the lowest on ties, a NaN
  // counting as -inf; writes that value to *max_value (-inf, at index 0,
  // when none is above -inf). Every level gives the plain loop's answer.
  // REQUIRES: n < 2^31.
  size_t (*argmax)(const float* in, size_t n, float* max_value);

  // The Gumbel-max draw's candidates (worker/gumbel_draw.h): writes to `ids`,
  // ascending, every i < n whose logit x = logits[i] is neither -inf nor NaN,
  // has OrderedFloatKey(x) >= scan.min_key, and whose score bound
  // fma(x - max_logit, inv_t, bounds[bits >> kGumbelScanBoundShift]) is not
  // below scan.best_score, bits being word t % 4 of
  // PhiloxDraws(scan.seed, scan.stream, t / 4) for token t = first + i;
  // returns how many. Every level picks the same ids (the vector ones run
  // Philox and the fma lane-wise: exact integer and fused float operations).
  // REQUIRES: first % 4 == 0; ids has room for n; scan.inv_t > 0.
  size_t (*gumbel_candidates)(const float* logits, size_t n, uint64_t first,
                              const GumbelScan& scan, uint32_t* ids);

  // Linear takes the panel kernels for prefill-sized inputs of fewer input
  // features than this. At AVX-512 only below 256: from 256 on, tile4's
  // 16-wide FMAs match or beat the AVX2 panel kernels it borrows for
  // attention (prefill of 256-token prompts, hidden 384: 177 against 138
  // GFLOP/s; hidden 512: 194 against 138), but under it each of tile4's dot
  // products ends in a horizontal sum after a few FMAs (hidden 128: 78
  // against 101 GFLOP/s).
  int64_t panel_linear_below_in_features = std::numeric_limits<int64_t>::max();
  // Query rows (query tokens x heads of the kv group) of one attention item
  // from which it takes the blocked path (each K/V piece read once for the
  // whole block) instead of row by row. 1 at AVX2, where blocks were measured
  // faster everywhere; at AVX-512 the row path's 16-wide score4/weigh4 won
  // for decode (a group's 4-8 rows), and blocks win for prompts, whose rows
  // would otherwise each stream the whole context again.
  int blocked_attention_min_rows = 1;
  // Most token rows one tile4 call takes: 4, or 6 at AVX-512, whose 32
  // registers hold 6 x 4 accumulators, so a speculative verify step's k + 1
  // rows (5 at k = 4) share one pass over the weights instead of a tile of
  // four and a second pass for the last row (which cost 3x the three rows
  // it joined: b1's gate_up at 5 rows, 1 thread, weights in L3, took 340 us
  // against 267 us at 4 and 243 us at 1; 318 us in one tile). Linear uses
  // it only where all of a step's rows fit one tile; more go four at a time.
  int tile4_max_rows = 4;

  // Decode attention of one query row at head_dim 16 over keys [0, keys) of
  // a paged cache, written normalised into out[0, 16):
  // out = value_scale * sum_j softmax_j(scale * q . k_j) v_j, key j's row at
  // key_rows + table[j / block_size] * block_bytes + (j % block_size) * 16
  // elements (V alike from value_rows). Null where a level has none (the
  // caller goes through score4 and weigh4): at AVX-512, where a row is one
  // vector, so 16 keys' scores are summed together and the softmax is online
  // a chunk of 16 at a time. REQUIRES: keys >= 1, block_size >= 1.
  using Attend16Fn = void (*)(const void* key_rows, const void* value_rows, const int32_t* table,
                              size_t block_bytes, int block_size, int keys, const float* q,
                              float scale, float value_scale, float* out);
  Attend16Fn attend16_f32 = nullptr;
  Attend16Fn attend16_bf16 = nullptr;
  Attend16Fn attend16_f16 = nullptr;
  Attend16Fn attend16_fp8e4m3 = nullptr;
  Attend16Fn attend16_fp8e5m2 = nullptr;

  using DotFn = float (*)(const void*, const float*, size_t);
  using Score4Fn = void (*)(const void*, size_t, size_t, size_t, const float*, size_t, int, float*,
                            size_t);
  using Tile4Fn = void (*)(const void*, size_t, const float*, size_t, size_t, int, float*, size_t);
  using Weigh4Fn = void (*)(const void*, size_t, size_t, size_t, const float*, size_t, int, float*,
                            size_t);
  using WidenFn = void (*)(const void*, float*, size_t);
  using NarrowFn = void (*)(const float*, void*, size_t);
  using Pack16Fn = void (*)(const void*, size_t, int, size_t, float*);
  DotFn dot(DType dtype) const;
  WidenFn widen(DType dtype) const;
  NarrowFn narrow(DType dtype) const;
  Score4Fn score4(DType dtype) const;
  Tile4Fn tile4(DType dtype) const;
  Weigh4Fn weigh4(DType dtype) const;
  Pack16Fn pack16(DType dtype) const;      // Null where gemm6x16 is.
  Attend16Fn attend16(DType dtype) const;  // Null where the level has none.
};

// Rows of the next gemm6x16 call when `remaining` (>= 1) token rows are
// left: the fewest calls of at most six rows, evenly split, since a call of
// one or two rows has too few accumulators to hide the FMA latency (eight
// rows run as 4 + 4, not 6 + 2).
inline int GemmRowsFor(int remaining) {
  const int calls = (remaining + 5) / 6;
  return (remaining + calls - 1) / calls;
}

// REQUIRES: level is in SupportedSimdLevels().
const SimdKernels& SimdKernelsFor(SimdLevel level);
// The kernels of BestSimdLevel(), chosen once.
const SimdKernels& BestSimdKernels();

namespace simd_internal {
// The table of each level, each defined in its own file (simd_plain.cc,
// simd_avx2.cc, simd_avx512.cc); SimdKernelsFor picks one.
const SimdKernels& PlainKernels();
const SimdKernels& Avx2Kernels();
const SimdKernels& Avx512Kernels();
}  // namespace simd_internal

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CPU_SIMD_H_
