#include "worker/lora/lora_kernel.h"

#include <algorithm>

namespace pagoda::worker {
namespace {

int LoraPanelsOf(int rank) { return (rank + kLoraPanelRanks - 1) / kLoraPanelRanks; }

void GrowLoraScratch(std::vector<float>& buffer, size_t size) {
  if (buffer.size() < size) buffer.resize(size);
}

// ranks[k] = scale · Σ_i a[k, i] · x[i] for one row, over the panels: each
// step adds one input element times a panel row of 16 ranks (16 contiguous
// lanes, which the vectorizer takes at any level).
void ShrinkLoraRowPlain(const LoraKernelWeights& w, const float* x_row, float* ranks) {
  const int panels = LoraPanelsOf(w.rank);
  std::fill_n(ranks, panels * kLoraPanelRanks, 0.0f);
  for (int p = 0; p < panels; ++p) {
    const float* panel = w.a_panels + p * w.in * kLoraPanelRanks;
    float* sums = ranks + p * kLoraPanelRanks;
    for (int64_t i = 0; i < w.in; ++i) {
      for (int c = 0; c < kLoraPanelRanks; ++c)
        sums[c] += panel[i * kLoraPanelRanks + c] * x_row[i];
    }
  }
  for (int k = 0; k < w.rank; ++k) ranks[k] *= w.scale;
}

// The level without panel kernels: row by row, y_row += Σ_k ranks[k] · Bᵀ[k].
void AddLoraRowsPlain(const LoraKernelWeights& w, const float* x, const int32_t* row_ids,
                      int num_rows, LoraScratch& scratch, float* y, int64_t y_stride) {
  GrowLoraScratch(scratch.ranks, LoraPanelsOf(w.rank) * kLoraPanelRanks);
  float* ranks = scratch.ranks.data();
  for (int n = 0; n < num_rows; ++n) {
    ShrinkLoraRowPlain(w, x + row_ids[n] * w.in, ranks);
    float* y_row = y + row_ids[n] * y_stride;
    for (int k = 0; k < w.rank; ++k) {
      const float* b_row = w.b_t + k * w.out;
      for (int64_t o = 0; o < w.out; ++o) y_row[o] += ranks[k] * b_row[o];
    }
  }
}

// Up to kLoraRowsPerCall rows through gemm6x16: gathered into one block,
// shrunk against each panel of A (all 16 columns written: ranks past `rank`
// come out 0 and meet no row of Bᵀ), scaled, expanded against Bᵀ's column
// blocks, and added to their rows of y.
void AddLoraRowsPanels(const SimdKernels& simd, const LoraKernelWeights& w, const float* x,
                       const int32_t* row_ids, int num_rows, LoraScratch& scratch, float* y,
                       int64_t y_stride) {
  const int panels = LoraPanelsOf(w.rank);
  const int64_t ld_ranks = int64_t{panels} * kLoraPanelRanks;
  float* gathered = scratch.x.data();
  float* ranks = scratch.ranks.data();
  float* delta = scratch.delta.data();
  for (int n = 0; n < num_rows; ++n) {
    std::copy_n(x + row_ids[n] * w.in, w.in, gathered + n * w.in);
  }
  for (int r = 0, block = 0; r < num_rows; r += block) {
    block = GemmRowsFor(num_rows - r);
    for (int p = 0; p < panels; ++p) {
      simd.gemm6x16(w.a_panels + p * w.in * kLoraPanelRanks, kLoraPanelRanks, w.in,
                    gathered + r * w.in, w.in, block, ranks + r * ld_ranks + p * kLoraPanelRanks,
                    ld_ranks, kLoraPanelRanks, /*accumulate=*/false);
    }
    for (int64_t i = r * ld_ranks; i < (r + block) * ld_ranks; ++i) ranks[i] *= w.scale;
    for (int64_t first = 0; first < w.out; first += kLoraPanelRanks) {
      const int cols = static_cast<int>(std::min<int64_t>(kLoraPanelRanks, w.out - first));
      simd.gemm6x16(w.b_t + first, w.out, w.rank, ranks + r * ld_ranks, ld_ranks, block,
                    delta + r * w.out + first, w.out, cols, /*accumulate=*/false);
    }
  }
  for (int n = 0; n < num_rows; ++n) {
    float* y_row = y + row_ids[n] * y_stride;
    const float* d = delta + n * w.out;
    for (int64_t o = 0; o < w.out; ++o) y_row[o] += d[o];
  }
}

}  // namespace

std::vector<float> PackLoraA(const float* a, int rank, int64_t in) {
  std::vector<float> panels(static_cast<size_t>(LoraPanelsOf(rank)) * kLoraPanelRanks * in, 0.0f);
  for (int k = 0; k < rank; ++k) {
    float* panel = panels.data() + (k / kLoraPanelRanks) * in * kLoraPanelRanks;
    for (int64_t i = 0; i < in; ++i)
      panel[i * kLoraPanelRanks + k % kLoraPanelRanks] = a[k * in + i];
  }
  return panels;
}

std::vector<float> TransposeLoraB(const float* b, int rank, int64_t out) {
  // The 16 floats past the end: the last column block's panel reads 16
  // columns of the last rank's row (gemm6x16 ignores those past `out`).
  std::vector<float> b_t(static_cast<size_t>(rank) * out + kLoraPanelRanks, 0.0f);
  for (int64_t o = 0; o < out; ++o) {
    for (int k = 0; k < rank; ++k) b_t[k * out + o] = b[o * rank + k];
  }
  return b_t;
}

void AddLoraUpdate(const SimdKernels& simd, const LoraKernelWeights& weights, const float* x,
                   const int32_t* row_ids, int num_rows, LoraScratch& scratch, float* y,
                   int64_t y_stride) {
  if (simd.gemm6x16 == nullptr) {
    AddLoraRowsPlain(weights, x, row_ids, num_rows, scratch, y, y_stride);
    return;
  }
  const int rows_per_call = std::min(num_rows, kLoraRowsPerCall);
  GrowLoraScratch(scratch.x, rows_per_call * weights.in);
  GrowLoraScratch(scratch.ranks, rows_per_call * LoraPanelsOf(weights.rank) * kLoraPanelRanks);
  GrowLoraScratch(scratch.delta, rows_per_call * weights.out);
  for (int n = 0; n < num_rows; n += kLoraRowsPerCall) {
    AddLoraRowsPanels(simd, weights, x, row_ids + n, std::min(kLoraRowsPerCall, num_rows - n),
                      scratch, y, y_stride);
  }
}

}  // namespace pagoda::worker
