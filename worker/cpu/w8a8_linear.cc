#include "worker/cpu/w8a8_linear.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/fp8.h"
#include "worker/cpu/host_memory.h"
#include "worker/cpu/w8a8_kernels.h"

namespace pagoda::worker {
namespace {

// Output rows a task takes at least.
constexpr int64_t kW8A8MinRowsPerTask = 16;
// Output rows whose codes are run over every token row before the next.
constexpr int64_t kW8A8BandRows = 32;
// vLLM's smallest per-token FP8 scale: an all-zero row still divides.
constexpr float kMinFp8TokenScale = 1.0f / (kFp8E4M3Max * 512.0f);

class CpuW8A8Linear final : public Linear {
 public:
  CpuW8A8Linear(const QuantizedWeight& weight, ThreadPool* pool, SimdLevel level)
      : pool_(pool),
        kernels_(W8A8KernelsFor(level)),
        fp8_(weight.code_type == CodeType::kFloat8E4M3),
        input_quant_(weight.input_quant),
        input_scale_(weight.input_scale),
        out_(weight.out_features),
        in_(weight.in_features),
        padded_in_((weight.in_features + kW8A8Chunk - 1) / kW8A8Chunk * kW8A8Chunk),
        weight_scales_(weight.scales),
        bias_(weight.bias),
        code_bytes_(std::max<size_t>(1, static_cast<size_t>(out_ * padded_in_))),
        codes_(static_cast<uint8_t*>(AllocateHost(code_bytes_))) {
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

  void QuantizeInt8(const float* x, int rows) {
    x_i8_.assign(static_cast<size_t>(rows) * padded_in_, 0);
    x_scale_.assign(rows, 0.0f);
    x_sum_.assign(rows, 0);
    for (int r = 0; r < rows; ++r) {
      const float* row = x + r * in_;
      const float scale = AbsMax(row, in_) / 127.0f;
      if (scale == 0.0f) continue;  // q = 0.
      if (!std::isfinite(scale)) {
        // A NaN or infinite input: its outputs are NaN, as a float product's
        // would be, rather than whatever int8 a NaN converts to.
        x_scale_[r] = std::numeric_limits<float>::quiet_NaN();
        continue;
      }
      int32_t sum = 0;
      for (int64_t i = 0; i < in_; ++i) {
        // nearbyint rounds half to even (the default mode), as torch.round.
        const float q = std::clamp(std::nearbyint(row[i] / scale), -128.0f, 127.0f);
        x_i8_[r * padded_in_ + i] = static_cast<int8_t>(q);
        sum += static_cast<int32_t>(q);
      }
      x_scale_[r] = scale;
      x_sum_[r] = sum;
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
  // [out, padded_in_]: int8 + 128, or E4M3; host_memory.h's pages (huge
  // where granted), as the other weights: a decode step streams them.
  size_t code_bytes_;
  uint8_t* codes_;
  std::vector<int8_t> x_i8_;    // [rows, padded_in_]: int8 inputs.
  std::vector<float> x_f32_;    // [rows, padded_in_]: E4M3-valued (or raw) inputs.
  std::vector<float> x_scale_;  // [rows]
  std::vector<int32_t> x_sum_;  // [rows]: sum of the int8 inputs.
};

}  // namespace

std::unique_ptr<Linear> CreateCpuW8A8Linear(const QuantizedWeight& weight, ThreadPool* pool,
                                            SimdLevel level) {
  return std::make_unique<CpuW8A8Linear>(weight, pool, level);
}

}  // namespace pagoda::worker
