#include "worker/cpu/quant_linear.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "worker/cpu/host_memory.h"
#include "worker/cpu/panel_linear.h"
#include "worker/cpu/quant_a8_kernels.h"
#include "worker/cpu/quant_kernels.h"
#include "worker/cpu/quant_tile_kernels.h"

namespace pagoda::worker {
namespace {

// Host memory from host_memory.h (huge pages where granted, as the dense
// weights): the codes are what a decode step streams.
class HostBytes {
 public:
  void Allocate(size_t bytes) {
    bytes_ = std::max<size_t>(1, bytes);
    data_ = static_cast<uint8_t*>(AllocateHost(bytes_));
    std::fill(data_, data_ + bytes_, 0);
  }
  ~HostBytes() {
    if (data_ != nullptr) FreeHost(data_, bytes_);
  }
  uint8_t* data() const { return data_; }
  size_t size() const { return bytes_; }

 private:
  uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
};

// Output rows a task takes at least: about 32 KB of 4-bit codes at hidden 2048.
constexpr int64_t kMinRowsPerTask = 16;
// Output rows that one block of segments runs over before the next block.
constexpr int64_t kBandRows = 64;
// Bytes of x (all token rows of one kernel call) one block of segments
// reads: most of a 48 KB L1 (the codes stream through the rest, a few
// hundred bytes a row). 16 KB made batch 8 take 15-30 % longer: each block
// costs every token row a reduction and a read-modify-write of y.
constexpr size_t kBlockXBytes = 32 * 1024;

// Token rows from which Forward dequantizes panels of 16 output rows to f32
// once per depth block and runs the dense panel product over them (a
// prompt): the row kernel reads x once per output row, so a long prompt's
// product was bound by those loads (a 64-token prompt through a 1B model
// took minutes on two cores); the panel kernel reuses each x load for 16
// outputs. Below it the row kernel's cost per weight, not per load, wins.
constexpr int kQuantPanelMinRows = 32;
constexpr int kQuantPanelWidth = 16;
// Token rows of a prompt that the tile kernels take through every
// tile before the next rows: their int8 inputs (512 KB at 8192 inputs a row)
// stay in L2 (2 MB a core) while the codes stream once a block.
constexpr int kTileRowBlock = 64;

class CpuQuantLinear final : public Linear {
 public:
  CpuQuantLinear(const QuantizedWeight& weight, ThreadPool* pool, SimdLevel level,
                 WeightOnlyActivations activations, Int8Layout layout)
      : pool_(pool),
        simd_(SimdKernelsFor(level)),
        kernel_(weight.bits == 4 ? QuantKernelsFor(level).row_int4
                                 : QuantKernelsFor(level).row_int8),
        max_rows_(QuantKernelsFor(level).max_rows),
        a8_kernel_(weight.bits == 4 ? QuantA8KernelsFor(level).row_int4
                                    : QuantA8KernelsFor(level).row_int8),
        a8_max_rows_(QuantA8KernelsFor(level).max_rows),
        bits_(weight.bits),
        out_(weight.out_features),
        in_(weight.in_features),
        num_groups_(weight.num_groups),
        bias_(weight.bias) {
    PlanSegments(weight);
    // The level's vector group quantization (the same bits at every level).
    const QuantTileKernels* vector = ChooseQuantTileKernels(level, Int8Layout::kBest);
    quantize_group_ = (vector != nullptr ? *vector : PlainQuantTileKernels()).quantize_group;
    // A group longer than the int32 sums allow keeps f32 inputs.
    int8_inputs_ = activations == WeightOnlyActivations::kInt8 &&
                   std::all_of(segments_.begin(), segments_.end(), [](const QuantSegment& seg) {
                     return seg.length <= kQuantA8MaxSegment;
                   });
    // With int8 inputs at AVX2 and AVX-512, the tile layout
    // (quant_tile_kernels.h) instead of the row layout: decode is bound by
    // the per-row steps of the row kernels, not by reading the codes.
    const QuantTileKernels* tiles = ChooseQuantTileKernels(level, layout);
    if (int8_inputs_ && tiles != nullptr) {
      tile_kernel_ = bits_ == 4 ? tiles->tile_int4 : tiles->tile_int8;
      PackTiles(weight);
      return;
    }
    PackCodes(weight);
    params_.resize(static_cast<size_t>(out_ * num_groups_) * 2);
    for (int64_t k = 0; k < out_ * num_groups_; ++k) {
      params_[2 * k] = weight.scales[k];
      params_[2 * k + 1] = -weight.scales[k] * weight.zeros[k];
    }
  }

  int64_t in_features() const override { return in_; }
  int64_t out_features() const override { return out_; }
  // The tile layout's padding rows (out_ rounded up to 16) are not counted.
  size_t weight_bytes() const override {
    return static_cast<size_t>(out_) * padded_in_ * bits_ / 8 +
           (static_cast<size_t>(out_) * num_groups_ * 2 + bias_.size()) * sizeof(float);
  }

  // Output rows are split among the threads; within a task, the segments
  // are taken in blocks whose slice of x (every token row of the call) fits
  // L1, each block run over a band of output rows before the next: x is
  // read from L1 for every output row rather than re-streamed from L2.
  // With int8 inputs every path (rows, panels) multiplies the same
  // quantized values, so a token's numerics do not depend on its batch.
  void Forward(const void* x_raw, int rows, void* y_raw) override {
    if (rows <= 0) return;
    const float* x = Gathered(static_cast<const float*>(x_raw), rows);
    float* y = static_cast<float*>(y_raw);
    if (int8_inputs_) QuantizeInputs(x, rows);
    if (tile_kernel_ != nullptr) return ForwardTiles(rows, y);
    if (rows >= kQuantPanelMinRows && simd_.gemm6x16 != nullptr) {
      return ForwardPanels(int8_inputs_ ? DequantizedInputs(rows) : x, rows, y);
    }
    const size_t num_segments = segments_.size();
    if (int8_inputs_) {
      ForEachBand(rows, a8_max_rows_, sizeof(int8_t), y,
                  [&](int64_t o, int r, int count, int first, int n, bool accumulate) {
                    a8_kernel_(CodesOf(o), ParamsOf(o), segments_.data() + first, n,
                               x_q_.data() + r * padded_in_, padded_in_,
                               x_scale_.data() + first * rows + r,
                               x_qsum_.data() + first * rows + r, rows, count, y + r * out_ + o,
                               out_, accumulate);
                  });
      return;
    }
    SumSegments(x, rows);
    ForEachBand(rows, max_rows_, sizeof(float), y,
                [&](int64_t o, int r, int count, int first, int n, bool accumulate) {
                  kernel_(CodesOf(o), ParamsOf(o), segments_.data() + first, n, x + r * padded_in_,
                          padded_in_, xsum_.data() + r * num_segments + first, num_segments, count,
                          y + r * out_ + o, out_, accumulate);
                });
  }

 private:
  const uint8_t* CodesOf(int64_t o) const { return codes_.data() + o * (padded_in_ * bits_ / 8); }
  const float* ParamsOf(int64_t o) const { return params_.data() + o * num_groups_ * 2; }

  // call(o, r, count, first, n, accumulate) for every output row o, token
  // rows [r, r + count) (count <= max_rows) and block of segments
  // [first, first + n); then the bias. x_bytes: the bytes of one input.
  template <typename Call>
  void ForEachBand(int rows, int max_rows, size_t x_bytes, float* y, const Call& call) {
    const std::vector<int> blocks = SegmentBlocks(std::min(rows, max_rows) * x_bytes);
    pool_->ParallelFor(out_, kMinRowsPerTask, [&](int64_t begin, int64_t end) {
      for (int64_t band = begin; band < end; band += kBandRows) {
        const int64_t band_end = std::min(end, band + kBandRows);
        for (size_t b = 0; b + 1 < blocks.size(); ++b) {
          for (int64_t o = band; o < band_end; ++o) {
            for (int r = 0; r < rows; r += max_rows) {
              call(o, r, std::min(max_rows, rows - r), blocks[b], blocks[b + 1] - blocks[b], b > 0);
            }
          }
        }
        if (bias_.empty()) continue;
        for (int64_t o = band; o < band_end; ++o) {
          for (int r = 0; r < rows; ++r) y[r * out_ + o] += bias_[o];
        }
      }
    });
  }

  // Each tile of 16 output rows over all of its segments, up to
  // kQuantTileMaxTokens token rows a call, tiles split among the threads;
  // a prompt in blocks of kTileRowBlock token rows, each block's inputs
  // read from L2 for every tile and each tile's codes from L1/L2 for every
  // call of the block. Every token row, in a prompt or a decode batch,
  // takes the same steps, so its outputs do not depend on the others.
  void ForwardTiles(int rows, float* y) {
    for (int first = 0; first < rows; first += kTileRowBlock) {
      ForwardTileBlock(first, std::min(kTileRowBlock, rows - first), rows, y);
    }
  }

  void ForwardTileBlock(int first, int block, int rows, float* y) {
    const int64_t num_tiles = (out_ + kQuantTileRows - 1) / kQuantTileRows;
    const size_t tile_bytes = QuantTileBytes(padded_in_, bits_);
    const int num_segments = static_cast<int>(segments_.size());
    pool_->ParallelFor(
        num_tiles, kMinRowsPerTask / kQuantTileRows, [&](int64_t begin, int64_t end) {
          for (int64_t t = begin; t < end; ++t) {
            const int64_t o = t * kQuantTileRows;
            const int cols = static_cast<int>(std::min<int64_t>(kQuantTileRows, out_ - o));
            // The next tile of this task is pulled into L2 during the first call.
            const uint8_t* next = t + 1 < end ? tile_codes_.data() + (t + 1) * tile_bytes : nullptr;
            for (int r = first; r < first + block; r += kQuantTileMaxTokens) {
              tile_kernel_(tile_codes_.data() + t * tile_bytes,
                           tile_params_.data() + t * num_groups_ * 2 * kQuantTileRows,
                           segments_.data(), num_segments, x_q_.data() + r * padded_in_, padded_in_,
                           x_scale_.data() + r, x_qsum_.data() + r, rows,
                           std::min(kQuantTileMaxTokens, first + block - r), y + r * out_ + o, out_,
                           cols, r == first ? next : nullptr);
            }
            if (bias_.empty()) continue;
            for (int r = first; r < first + block; ++r) {
              for (int c = 0; c < cols; ++c) y[r * out_ + o + c] += bias_[o + c];
            }
          }
        });
  }

  void PackTiles(const QuantizedWeight& weight) {
    const int64_t num_tiles = (out_ + kQuantTileRows - 1) / kQuantTileRows;
    const size_t tile_bytes = QuantTileBytes(padded_in_, bits_);
    tile_codes_.Allocate(tile_bytes * num_tiles);
    tile_params_.assign(static_cast<size_t>(num_tiles * num_groups_) * 2 * kQuantTileRows, 0.0f);
    for (int64_t t = 0; t < num_tiles; ++t) {
      const int64_t o = t * kQuantTileRows;
      PackQuantTile(
          bits_, padded_in_,
          [&](int j, int64_t p) -> int {
            return o + j >= out_ || source_[p] < 0 ? 0 : weight.codes[(o + j) * in_ + source_[p]];
          },
          tile_codes_.data() + t * tile_bytes);
      float* params = tile_params_.data() + t * num_groups_ * 2 * kQuantTileRows;
      for (int j = 0; j < kQuantTileRows && o + j < out_; ++j) {
        for (int64_t g = 0; g < num_groups_; ++g) {
          const size_t k = (o + j) * num_groups_ + g;
          params[g * 2 * kQuantTileRows + j] = weight.scales[k];
          params[g * 2 * kQuantTileRows + kQuantTileRows + j] = -weight.scales[k] * weight.zeros[k];
        }
      }
    }
  }

  // Output o's code at padded input p, scale and offset of group g, in
  // whichever layout the Linear packed.
  int CodeAt(int64_t o, int64_t p) const {
    if (tile_kernel_ != nullptr) {
      const int64_t t = o / kQuantTileRows;
      return QuantTileCode(tile_codes_.data() + t * QuantTileBytes(padded_in_, bits_), bits_,
                           static_cast<int>(o % kQuantTileRows), p);
    }
    const uint8_t* codes = codes_.data() + o * (static_cast<size_t>(padded_in_) * bits_ / 8);
    if (bits_ == 8) return codes[p];
    const uint8_t byte = codes[(p / kQuantChunk) * (kQuantChunk / 2) + p % (kQuantChunk / 2)];
    return (p % kQuantChunk) < kQuantChunk / 2 ? byte & 0xF : byte >> 4;
  }
  const float* ParamAt(int64_t o, int64_t g, int which) const {
    if (tile_kernel_ == nullptr) return &params_[(o * num_groups_ + g) * 2 + which];
    const int64_t t = o / kQuantTileRows;
    return &tile_params_[((t * num_groups_ + g) * 2 + which) * kQuantTileRows + o % kQuantTileRows];
  }

  // Inputs sorted by group (stable), each group's run padded to whole chunks.
  void PlanSegments(const QuantizedWeight& weight) {
    std::vector<int32_t> order(static_cast<size_t>(in_));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return weight.group_of_input[a] < weight.group_of_input[b];
    });
    for (size_t k = 0; k < order.size();) {
      const int32_t group = weight.group_of_input[order[k]];
      const int32_t start = static_cast<int32_t>(source_.size());
      for (; k < order.size() && weight.group_of_input[order[k]] == group; ++k) {
        source_.push_back(order[k]);
      }
      while (source_.size() % kQuantChunk != 0) source_.push_back(-1);
      segments_.push_back({start, static_cast<int32_t>(source_.size()) - start, group});
      group_of_padded_.resize(source_.size(), group);
    }
    padded_in_ = static_cast<int64_t>(source_.size());
    identity_ = padded_in_ == in_;
    for (int64_t i = 0; identity_ && i < in_; ++i) identity_ = source_[i] == i;
  }

  void PackCodes(const QuantizedWeight& weight) {
    const size_t row_bytes = static_cast<size_t>(padded_in_) * bits_ / 8;
    codes_.Allocate(row_bytes * out_);
    for (int64_t o = 0; o < out_; ++o) {
      uint8_t* row = codes_.data() + o * row_bytes;
      const uint8_t* src = weight.codes.data() + o * in_;
      for (int64_t p = 0; p < padded_in_; ++p) {
        const uint8_t code = source_[p] < 0 ? 0 : src[source_[p]];
        if (bits_ == 8) {
          row[p] = code;
          continue;
        }
        const int64_t in_chunk = p % kQuantChunk;
        uint8_t& byte = row[(p / kQuantChunk) * (kQuantChunk / 2) + in_chunk % (kQuantChunk / 2)];
        byte |= in_chunk < kQuantChunk / 2 ? code : static_cast<uint8_t>(code << 4);
      }
    }
  }

  // Every token row through panels of 16 dequantized output rows, depth
  // block by depth block (panel_linear.h's layout and kernel); rows in
  // blocks of kPanelRowBlock so that a block's slice of x stays in L2.
  void ForwardPanels(const float* x, int rows, float* y) {
    const int64_t panels = (out_ + kQuantPanelWidth - 1) / kQuantPanelWidth;
    for (int first = 0; first < rows; first += kPanelRowBlock) {
      const int block = std::min(kPanelRowBlock, rows - first);
      pool_->ParallelFor(panels, 1, [&](int64_t begin, int64_t end) {
        thread_local std::vector<float> packed;
        packed.assign(kPanelDepth * kQuantPanelWidth, 0.0f);
        for (int64_t panel = begin; panel < end; ++panel) {
          const int64_t o = panel * kQuantPanelWidth;
          const int cols = static_cast<int>(std::min<int64_t>(kQuantPanelWidth, out_ - o));
          for (int64_t k = 0; k < padded_in_; k += kPanelDepth) {
            const int64_t depth = std::min<int64_t>(kPanelDepth, padded_in_ - k);
            DequantizePanel(o, cols, k, depth, packed.data());
            for (int r = 0, n = 0; r < block; r += n) {
              n = GemmRowsFor(block - r);
              simd_.gemm6x16(packed.data(), kQuantPanelWidth, depth,
                             x + (first + r) * padded_in_ + k, padded_in_, n,
                             y + (first + r) * out_ + o, out_, cols, k > 0);
            }
          }
          if (bias_.empty()) continue;
          for (int r = first; r < first + block; ++r) {
            for (int c = 0; c < cols; ++c) y[r * out_ + o + c] += bias_[o + c];
          }
        }
      });
    }
  }

  // packed[i * 16 + c] = the weight of output o + c at padded input k + i,
  // code * scale - scale * zero (0 at padding: its code is 0 and its x is 0).
  void DequantizePanel(int64_t o, int cols, int64_t k, int64_t depth, float* packed) const {
    for (int c = 0; c < cols; ++c) {
      for (int64_t i = 0; i < depth; ++i) {
        const int64_t p = k + i;
        const int32_t g = group_of_padded_[p];
        packed[i * kQuantPanelWidth + c] =
            static_cast<float>(CodeAt(o + c, p)) * *ParamAt(o + c, g, 0) + *ParamAt(o + c, g, 1);
      }
    }
  }

  // Segment indices where blocks start, and the segment count last: whole
  // segments, at least one a block, x's slice (`input_bytes` an input, all
  // token rows of a call) in about kBlockXBytes.
  std::vector<int> SegmentBlocks(size_t input_bytes) const {
    const int64_t budget = static_cast<int64_t>(kBlockXBytes / input_bytes);
    std::vector<int> blocks = {0};
    int64_t length = 0;
    for (size_t s = 0; s < segments_.size(); ++s) {
      if (length > 0 && length + segments_[s].length > budget) {
        blocks.push_back(static_cast<int>(s));
        length = 0;
      }
      length += segments_[s].length;
    }
    blocks.push_back(static_cast<int>(segments_.size()));
    return blocks;
  }

  // x in the padded, regrouped order (x itself when that is its own).
  const float* Gathered(const float* x, int rows) {
    if (identity_) return x;
    gathered_.resize(static_cast<size_t>(rows) * padded_in_);
    for (int r = 0; r < rows; ++r) {
      for (int64_t p = 0; p < padded_in_; ++p) {
        gathered_[r * padded_in_ + p] = source_[p] < 0 ? 0.0f : x[r * in_ + source_[p]];
      }
    }
    return gathered_.data();
  }

  // Each token row's inputs of each segment (one quantization group) to
  // int8: s = max|x| / 127, q = round_half_even(x / s), clamped to
  // [-128, 127] (W8A8's rule, per group rather than per token). x_qsum_
  // gets s * sum(q), for the zero points; both segment-major
  // (quant_a8_kernels.h). A NaN or infinite input makes its segment's scale
  // NaN: its outputs are NaN, as a float product's would be.
  void QuantizeInputs(const float* x, int rows) {
    const size_t num_segments = segments_.size();
    x_q_.resize(static_cast<size_t>(rows) * padded_in_);
    x_scale_.resize(rows * num_segments);
    x_qsum_.resize(rows * num_segments);
    for (int r = 0; r < rows; ++r) {
      for (size_t s = 0; s < num_segments; ++s) {
        const int64_t begin = r * padded_in_ + segments_[s].start;
        quantize_group_(x + begin, segments_[s].length, x_q_.data() + begin,
                        &x_scale_[s * rows + r], &x_qsum_[s * rows + r]);
      }
    }
  }

  // The quantized inputs as f32 (q * s), for the panel path.
  const float* DequantizedInputs(int rows) {
    const size_t num_segments = segments_.size();
    dequantized_.resize(static_cast<size_t>(rows) * padded_in_);
    for (int r = 0; r < rows; ++r) {
      for (size_t s = 0; s < num_segments; ++s) {
        const float scale = x_scale_[s * rows + r];
        const int64_t begin = r * padded_in_ + segments_[s].start;
        for (int64_t i = begin; i < begin + segments_[s].length; ++i) {
          dequantized_[i] = static_cast<float>(x_q_[i]) * scale;
        }
      }
    }
    return dequantized_.data();
  }

  void SumSegments(const float* x, int rows) {
    xsum_.resize(static_cast<size_t>(rows) * segments_.size());
    for (int r = 0; r < rows; ++r) {
      for (size_t s = 0; s < segments_.size(); ++s) {
        const float* begin = x + r * padded_in_ + segments_[s].start;
        xsum_[r * segments_.size() + s] = std::accumulate(begin, begin + segments_[s].length, 0.0f);
      }
    }
  }

  ThreadPool* pool_;
  const SimdKernels& simd_;
  QuantRowFn kernel_;
  int max_rows_;
  QuantA8RowFn a8_kernel_;
  int a8_max_rows_;
  bool int8_inputs_ = false;
  int bits_;
  int64_t out_;
  int64_t in_;
  int64_t num_groups_;
  std::vector<float> bias_;  // [out] or empty.
  int64_t padded_in_ = 0;
  bool identity_ = false;
  std::vector<int32_t> source_;           // Padded input p reads x[source_[p]], -1: zero.
  std::vector<int32_t> group_of_padded_;  // [padded_in_]: the group of each padded input.
  std::vector<QuantSegment> segments_;
  HostBytes codes_;                    // [out, padded_in_ * bits / 8], chunked.
  QuantizeGroupFn quantize_group_;     // QuantizeInputs' rule, per segment and row.
  QuantTileFn tile_kernel_ = nullptr;  // Set where the tile layout is used.
  HostBytes tile_codes_;               // [tiles, QuantTileBytes], instead of codes_.
  std::vector<float> tile_params_;     // [tiles, groups, 2, 16], instead of params_.
  std::vector<float> params_;          // [out, num_groups, 2]: scale, -scale * zero.
  std::vector<float> gathered_;        // [rows, padded_in_]
  std::vector<float> xsum_;            // [rows, segments]: sum of x.
  std::vector<int8_t> x_q_;            // [rows, padded_in_]: int8 inputs.
  std::vector<float> x_scale_;         // [segments, rows]: their scales.
  std::vector<float> x_qsum_;          // [segments, rows]: s * sum(q).
  std::vector<float> dequantized_;     // [rows, padded_in_]: q * s, for the panels.
};

}  // namespace

std::unique_ptr<Linear> CreateCpuQuantLinear(const QuantizedWeight& weight, ThreadPool* pool,
                                             SimdLevel level, WeightOnlyActivations activations,
                                             Int8Layout layout) {
  return std::make_unique<CpuQuantLinear>(weight, pool, level, activations, layout);
}

}  // namespace pagoda::worker
