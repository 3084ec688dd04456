#include "worker/cpu/w8a8_linear.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/fp8.h"
#include "worker/cpu/host_memory.h"
#include "worker/cpu/quant_tile_kernels.h"
#include "worker/cpu/w8a8_kernels.h"

namespace pagoda::worker {
namespace {

// Output rows a task takes at least.
constexpr int64_t kW8A8MinRowsPerTask = 16;
// Output rows whose codes are run over every token row before the next.
constexpr int64_t kW8A8BandRows = 32;
// Token rows of a prompt that the tile layout takes through every tile
// before the next rows: their int8 inputs (128 KB at 2048 inputs a row,
// 512 KB at 8192) stay in L2 while each tile's codes are read from memory
// once a block and from L1/L2 by each call of the block (8 token rows).
constexpr int kW8A8TileRowBlock = 64;
// vLLM's smallest per-token FP8 scale: an all-zero row still divides.
constexpr float kMinFp8TokenScale = 1.0f / (kFp8E4M3Max * 512.0f);

class CpuW8A8Linear final : public Linear {
 public:
  CpuW8A8Linear(const QuantizedWeight& weight, ThreadPool* pool, SimdLevel level, W8A8Layout layout)
      : pool_(pool),
        kernels_(W8A8KernelsFor(level)),
        fp8_(weight.code_type == CodeType::kFloat8E4M3),
        input_quant_(weight.input_quant),
        input_scale_(weight.input_scale),
        out_(weight.out_features),
        in_(weight.in_features),
        padded_in_((weight.in_features + kW8A8Chunk - 1) / kW8A8Chunk * kW8A8Chunk),
        weight_scales_(weight.scales),
        bias_(weight.bias) {
    // The level's vector token quantization (the same bits at every level).
    const W8A8TileKernels* vector = ChooseW8A8TileKernels(level, W8A8Layout::kBest);
    quantize_token_ = (vector != nullptr ? *vector : PlainW8A8TileKernels()).quantize_token;
    const W8A8TileKernels* tiles = ChooseW8A8TileKernels(level, layout);
    if (!fp8_ && tiles != nullptr) {
      tile_kernel_ = tiles->tile;
      PackTiles(weight);
      return;
    }
    code_bytes_ = std::max<size_t>(1, static_cast<size_t>(out_ * padded_in_));
    codes_ = static_cast<uint8_t*>(AllocateHost(code_bytes_));
    std::fill(codes_, codes_ + code_bytes_, 0);
    for (int64_t o = 0; o < out_; ++o) {
      std::copy(weight.codes.begin() + o * in_, weight.codes.begin() + (o + 1) * in_,
                codes_ + o * padded_in_);
    }
  }
  ~CpuW8A8Linear() override { FreeHost(codes_, code_bytes_); }
  CpuW8A8Linear(const CpuW8A8Linear&) = delete;
  CpuW8A8Linear& operator=(const CpuW8A8Linear&) = delete;

  int64_t in_features() const override { return in_; }
  int64_t out_features() const override { return out_; }
  size_t weight_bytes() const override {
    return static_cast<size_t>(out_ * padded_in_) +
           (weight_scales_.size() + bias_.size()) * sizeof(float);
  }

  void Forward(const void* x_raw, int rows, void* y_raw) override {
    if (rows <= 0) return;
    const float* x = static_cast<const float*>(x_raw);
    if (fp8_) {
      QuantizeFp8(x, rows);
    } else {
      QuantizeInt8(x, rows);
    }
    float* y = static_cast<float*>(y_raw);
    if (tile_kernel_ != nullptr) return ForwardTiles(rows, y);
    // A band of output rows' codes (at most 32 x 8 KB, in L2) serves every
    // chunk of token rows in turn, each chunk's inputs (in L1) the band:
    // a long prompt's inputs are not streamed again for every output row.
    pool_->ParallelFor(out_, kW8A8MinRowsPerTask, [&](int64_t begin, int64_t end) {
      for (int64_t band = begin; band < end; band += kW8A8BandRows) {
        const int64_t band_end = std::min(end, band + kW8A8BandRows);
        for (int r = 0; r < rows; r += kW8A8MaxRows) {
          for (int64_t o = band; o < band_end; ++o) {
            OutputRows(o, r, std::min(kW8A8MaxRows, rows - r), y);
          }
        }
      }
    });
  }

 private:
  int64_t num_tiles() const { return (out_ + kQuantTileRows - 1) / kQuantTileRows; }

  // Codes in tiles of 16 output rows (quant_tile_kernels.h's 8-bit layout),
  // their scales and biases beside them, zero past the last output row.
  void PackTiles(const QuantizedWeight& weight) {
    const size_t tile_bytes = QuantTileBytes(padded_in_, 8);
    code_bytes_ = std::max<size_t>(1, tile_bytes * num_tiles());
    codes_ = static_cast<uint8_t*>(AllocateHost(code_bytes_));
    tile_scales_.assign(num_tiles() * kQuantTileRows, 0.0f);
    if (!bias_.empty()) tile_bias_.assign(num_tiles() * kQuantTileRows, 0.0f);
    for (int64_t t = 0; t < num_tiles(); ++t) {
      const int64_t o = t * kQuantTileRows;
      PackQuantTile(
          8, padded_in_,
          [&](int j, int64_t p) -> int {
            return o + j < out_ && p < in_ ? weight.codes[(o + j) * in_ + p] : 0;
          },
          codes_ + t * tile_bytes);
      for (int64_t j = 0; j < kQuantTileRows && o + j < out_; ++j) {
        tile_scales_[o + j] = weight_scales_[o + j];
        if (!bias_.empty()) tile_bias_[o + j] = bias_[o + j];
      }
    }
  }

  // Every tile over up to 8 token rows a call, tiles split among the
  // threads; a prompt in blocks of kW8A8TileRowBlock token rows. Every
  // token row takes the same steps whatever the others, so its outputs are
  // the same bits alone, in a decode batch or in a prompt (and the same as
  // the row layout's).
  void ForwardTiles(int rows, float* y) {
    const size_t tile_bytes = QuantTileBytes(padded_in_, 8);
    for (int first = 0; first < rows; first += kW8A8TileRowBlock) {
      const int block_end = std::min(rows, first + kW8A8TileRowBlock);
      pool_->ParallelFor(num_tiles(), 1, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          const int64_t o = t * kQuantTileRows;
          const int cols = static_cast<int>(std::min<int64_t>(kQuantTileRows, out_ - o));
          // The next tile of this task is pulled into L2 during the first call.
          const uint8_t* next = t + 1 < end ? codes_ + (t + 1) * tile_bytes : nullptr;
          for (int r = first; r < block_end; r += kQuantTileMaxTokens) {
            tile_kernel_(codes_ + t * tile_bytes, padded_in_, x_i8_.data() + r * padded_in_,
                         padded_in_, x_scale_.data() + r, x_sum_.data() + r,
                         tile_scales_.data() + o, tile_bias_.empty() ? nullptr : &tile_bias_[o],
                         std::min(kQuantTileMaxTokens, block_end - r), y + r * out_ + o, out_, cols,
                         r == first ? next : nullptr);
          }
        }
      });
    }
  }

  // y[r .. r + count, o].
  void OutputRows(int64_t o, int r, int count, float* y) const {
    const uint8_t* codes = codes_ + o * padded_in_;
    float values[kW8A8MaxRows];
    if (fp8_) {
      kernels_.fp8_dot(codes, x_f32_.data() + r * padded_in_, padded_in_, padded_in_, count,
                       values);
    } else {
      int32_t dots[kW8A8MaxRows];
      kernels_.int8_dot(codes, x_i8_.data() + r * padded_in_, padded_in_, padded_in_, count, dots);
      // The codes are the int8 values + 128.
      for (int k = 0; k < count; ++k) values[k] = static_cast<float>(dots[k] - 128 * x_sum_[r + k]);
    }
    for (int k = 0; k < count; ++k) {
      float value = values[k] * (x_scale_[r + k] * weight_scales_[o]);
      if (!bias_.empty()) value += bias_[o];
      y[(r + k) * out_ + o] = value;
    }
  }

  // max|row|, NaN if any element is NaN (std::max would skip it).
  static float AbsMax(const float* row, int64_t n) {
    float amax = 0.0f;
    bool nan = false;
    for (int64_t i = 0; i < n; ++i) {
      amax = std::max(amax, std::fabs(row[i]));
      nan |= std::isnan(row[i]);
    }
    return nan ? std::numeric_limits<float>::quiet_NaN() : amax;
  }

  // s = max|x| / 127 per token, q = round_half_even(x / s) (quantize_token_,
  // vectorized at AVX-512: a long prompt's rows are a million divisions). A
  // NaN or infinite input makes s NaN: its outputs are NaN, as a float
  // product's would be, rather than whatever int8 a NaN converts to.
  void QuantizeInt8(const float* x, int rows) {
    x_i8_.resize(static_cast<size_t>(rows) * padded_in_);
    x_scale_.resize(rows);
    x_sum_.resize(rows);
    for (int r = 0; r < rows; ++r) {
      int8_t* q = x_i8_.data() + r * padded_in_;
      quantize_token_(x + r * in_, in_, q, &x_scale_[r], &x_sum_[r]);
      std::fill(q + in_, q + padded_in_, 0);
    }
  }

  float Fp8RowScale(const float* row) const {
    switch (input_quant_) {
      case InputQuant::kFp8PerToken:
        return std::max(AbsMax(row, in_) / kFp8E4M3Max, kMinFp8TokenScale);
      case InputQuant::kFp8Static:
        return input_scale_;
      default:
        return 1.0f;
    }
  }

  void QuantizeFp8(const float* x, int rows) {
    x_f32_.assign(static_cast<size_t>(rows) * padded_in_, 0.0f);
    x_scale_.assign(rows, 1.0f);
    const bool quantize = input_quant_ != InputQuant::kNone;
    for (int r = 0; r < rows; ++r) {
      const float* row = x + r * in_;
      float* q = x_f32_.data() + r * padded_in_;
      x_scale_[r] = Fp8RowScale(row);
      for (int64_t i = 0; i < in_; ++i) {
        q[i] = quantize ? Fp8E4M3ToFloat(FloatToFp8E4M3(row[i] / x_scale_[r])) : row[i];
      }
    }
  }

  ThreadPool* pool_;
  const W8A8Kernels& kernels_;
  bool fp8_;
  InputQuant input_quant_;
  float input_scale_;
  int64_t out_;
  int64_t in_;
  int64_t padded_in_;
  std::vector<float> weight_scales_;  // [out]
  std::vector<float> bias_;           // [out] or empty.
  // [out, padded_in_]: int8 + 128, or E4M3; or with tile_kernel_, [tiles,
  // QuantTileBytes(padded_in_, 8)]. host_memory.h's pages (huge where
  // granted), as the other weights: a decode step streams them.
  size_t code_bytes_ = 0;
  uint8_t* codes_ = nullptr;
  QuantizeTokenFn quantize_token_;
  W8A8TileFn tile_kernel_ = nullptr;  // Set where the codes lie in tiles.
  std::vector<float> tile_scales_;    // [tiles * 16]: weight_scales_, zero-padded.
  std::vector<float> tile_bias_;      // [tiles * 16] or empty: bias_, zero-padded.
  std::vector<int8_t> x_i8_;          // [rows, padded_in_]: int8 inputs.
  std::vector<float> x_f32_;          // [rows, padded_in_]: E4M3-valued (or raw) inputs.
  std::vector<float> x_scale_;        // [rows]
  std::vector<int32_t> x_sum_;        // [rows]: sum of the int8 inputs.
};

}  // namespace

std::unique_ptr<Linear> CreateCpuW8A8Linear(const QuantizedWeight& weight, ThreadPool* pool,
                                            SimdLevel level, W8A8Layout layout) {
  return std::make_unique<CpuW8A8Linear>(weight, pool, level, layout);
}

}  // namespace pagoda::worker
