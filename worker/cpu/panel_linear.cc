#include "worker/cpu/panel_linear.h"

#include <algorithm>
#include <vector>

namespace pagoda::worker {
namespace {

constexpr int kPanelWidth = 16;

// Output features [16 * panel, 16 * panel + 16) of every token row.
void RunPanel(const SimdKernels& simd, const float* x, int rows, const Tensor& weight,
              const float* bias, int64_t panel, float* packed, float* y) {
  const int64_t out_dim = weight.dim(0);
  const int64_t in_dim = weight.dim(1);
  const int64_t first = panel * kPanelWidth;
  const int cols = static_cast<int>(std::min<int64_t>(kPanelWidth, out_dim - first));
  const size_t width = DTypeSize(weight.dtype);
  const char* rows_base = static_cast<const char*>(weight.data) + first * in_dim * width;
  const SimdKernels::Pack16Fn pack = simd.pack16(weight.dtype);
  for (int64_t k = 0; k < in_dim; k += kPanelDepth) {
    const int64_t depth = std::min(kPanelDepth, in_dim - k);
    pack(rows_base + k * width, in_dim, cols, depth, packed);
    for (int r = 0, n = 0; r < rows; r += n) {
      n = GemmRowsFor(rows - r);
      simd.gemm6x16(packed, kPanelWidth, depth, x + r * in_dim + k, in_dim, n,
                    y + r * out_dim + first, out_dim, cols, /*accumulate=*/k > 0);
    }
  }
  if (in_dim == 0) {
    for (int r = 0; r < rows; ++r) std::fill_n(y + r * out_dim + first, cols, 0.0f);
  }
  if (bias == nullptr) return;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) y[r * out_dim + first + c] += bias[first + c];
  }
}

}  // namespace

void PanelLinear(ThreadPool& pool, const SimdKernels& simd, const float* x, int rows,
                 const Tensor& weight, const float* bias, float* y) {
  const int64_t panels = (weight.dim(0) + kPanelWidth - 1) / kPanelWidth;
  const int64_t in_dim = weight.dim(1);
  const int64_t out_dim = weight.dim(0);
  // Rows in blocks of kPanelRowBlock: a block's slice of x for one depth
  // block (kPanelRowBlock x kPanelDepth floats, 256 KiB) stays in L2 while
  // every panel of the thread runs over it, where a long prompt's whole
  // slice would come from L3 for every panel.
  for (int first = 0; first < rows; first += kPanelRowBlock) {
    const int block = std::min(kPanelRowBlock, rows - first);
    pool.ParallelFor(panels, 1, [&](int64_t begin, int64_t end) {
      thread_local std::vector<float> packed(kPanelDepth * kPanelWidth);
      for (int64_t panel = begin; panel < end; ++panel) {
        RunPanel(simd, x + first * in_dim, block, weight, bias, panel, packed.data(),
                 y + first * out_dim);
      }
    });
  }
}

}  // namespace pagoda::worker
