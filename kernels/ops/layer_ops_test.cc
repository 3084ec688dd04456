// RMSNorm, fused add + RMSNorm, rotary embedding, SiLU-and-mul and embedding
// lookup against float64 references on the host, over odd sizes.

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "kernels/ops/activation.h"
#include "kernels/ops/embedding.h"
#include "kernels/ops/rms_norm.h"
#include "kernels/ops/rope_cache.h"
#include "kernels/ops/rotary_embedding.h"
#include "tests/kernels/cuda_test_util.h"

namespace pagoda::kernels {
namespace {

using testing::Decode;
using testing::DeviceBuffer;
using testing::Encode;
using testing::RandomFloats;
using testing::RoundTrip;
using testing::Tolerance;

// Uploads `values` encoded as `type`.
std::unique_ptr<DeviceBuffer> ToDevice(ScalarType type, const std::vector<float>& values) {
  auto buffer = std::make_unique<DeviceBuffer>(values.size() * ScalarTypeSize(type));
  buffer->Upload(Encode(type, values));
  return buffer;
}

std::vector<float> FromDevice(ScalarType type, const DeviceBuffer& buffer, size_t count) {
  return Decode(type, buffer.Download<uint8_t>(count * ScalarTypeSize(type)));
}

// |got - want| <= tol * (1 + |want|) element-wise; NaN never passes.
void ExpectClose(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    if (!(std::abs(got[i] - want[i]) <= tol * (1.0 + std::abs(want[i])))) {
      ADD_FAILURE() << "element " << i << ": got " << got[i] << " want " << want[i];
      ++failures;
    }
  }
}

class LayerOpsTest : public ::testing::TestWithParam<ScalarType> {};

// RMSNorm (epsilon 1e-5) of `tokens` rows of `hidden` inputs drawn from
// [-amplitude, amplitude], read `stride` floats apart, against float64.
void CheckRmsNorm(ScalarType type, int tokens, int hidden, int stride, float amplitude,
                  uint32_t seed) {
  const std::vector<float> x =
      RoundTrip(type, RandomFloats(tokens * stride, -amplitude, amplitude, seed));
  const std::vector<float> w = RoundTrip(type, RandomFloats(hidden, 0.5, 1.5, seed + 1));
  auto dx = ToDevice(type, x), dw = ToDevice(type, w);
  DeviceBuffer out(tokens * hidden * ScalarTypeSize(type));
  out.Fill(0xFF);  // NaN everywhere until written
  RmsNormParams p{dx->get(), stride, dw->get(), out.get(), tokens, hidden, 1e-5f, type};
  PAGODA_ASSERT_CUDA_OK(LaunchRmsNorm(p, nullptr));
  PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());
  std::vector<double> want(tokens * hidden);
  for (int t = 0; t < tokens; ++t) {
    double sum = 0;
    for (int i = 0; i < hidden; ++i) sum += double{x[t * stride + i]} * x[t * stride + i];
    const double scale = 1.0 / std::sqrt(sum / hidden + 1e-5);
    for (int i = 0; i < hidden; ++i) want[t * hidden + i] = x[t * stride + i] * scale * w[i];
  }
  ExpectClose(FromDevice(type, out, tokens * hidden), want, Tolerance(type));
}

TEST_P(LayerOpsTest, RmsNormMatchesFloat64) {
  for (const auto& [tokens, hidden] : {std::pair{1, 32}, {7, 333}, {5, 4096}, {3, 5121}}) {
    SCOPED_TRACE(::testing::Message() << tokens << " x " << hidden);
    // Rows of a wider buffer.
    CheckRmsNorm(GetParam(), tokens, hidden, hidden + 17, 3.0f, static_cast<uint32_t>(hidden));
  }
}

TEST_P(LayerOpsTest, RmsNormAddsEpsilonInsideTheRoot) {
  // mean(x^2) ~ 3e-7 against epsilon 1e-5: outputs are up to ~0.5, and an
  // epsilon dropped or added outside the square root makes them ~5x larger,
  // far outside the tolerance.
  CheckRmsNorm(GetParam(), 2, 256, 256, 1e-3f, 4);
}

TEST_P(LayerOpsTest, FusedAddRmsNormUpdatesResidualAndInput) {
  const ScalarType type = GetParam();
  // 16-byte vectors in registers up to 16384; 1001 and 16392 take the
  // two-pass kernel.
  for (const auto& [tokens, hidden] :
       {std::pair{1, 64}, {9, 1000}, {4, 8192}, {3, 1001}, {2, 16392}}) {
    const std::vector<float> x = RoundTrip(type, RandomFloats(tokens * hidden, -2, 2, 1));
    const std::vector<float> r = RoundTrip(type, RandomFloats(tokens * hidden, -2, 2, 2));
    const std::vector<float> w = RoundTrip(type, RandomFloats(hidden, 0.5, 1.5, 3));
    auto dx = ToDevice(type, x), dr = ToDevice(type, r), dw = ToDevice(type, w);
    FusedAddRmsNormParams p{dx->get(), dr->get(), dw->get(), tokens, hidden, 1e-6f, type};
    PAGODA_ASSERT_CUDA_OK(LaunchFusedAddRmsNorm(p, nullptr));
    PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());
    std::vector<double> want_residual(tokens * hidden), want_out(tokens * hidden);
    for (int t = 0; t < tokens; ++t) {
      double sum = 0;
      for (int i = 0; i < hidden; ++i) {
        const double z = double{x[t * hidden + i]} + r[t * hidden + i];
        want_residual[t * hidden + i] = z;
        sum += z * z;
      }
      const double scale = 1.0 / std::sqrt(sum / hidden + 1e-6);
      for (int i = 0; i < hidden; ++i) {
        want_out[t * hidden + i] = want_residual[t * hidden + i] * scale * w[i];
      }
    }
    ExpectClose(FromDevice(type, *dr, tokens * hidden), want_residual, Tolerance(type));
    ExpectClose(FromDevice(type, *dx, tokens * hidden), want_out, 2 * Tolerance(type));
  }
}

// The separate-output form (the decoder layer's, with no copy of the input
// first) writes what the in-place form writes over its input, byte for
// byte, and leaves the input as it was; out aliasing residual is refused.
TEST_P(LayerOpsTest, FusedAddRmsNormIntoSeparateOutEqualsInPlace) {
  const ScalarType type = GetParam();
  const size_t elem = ScalarTypeSize(type);
  for (const auto& [tokens, hidden] : {std::pair{1, 4096}, {7, 1000}, {3, 1001}, {2, 16392}}) {
    const std::vector<float> x = RoundTrip(type, RandomFloats(tokens * hidden, -2, 2, 5));
    const std::vector<float> r = RoundTrip(type, RandomFloats(tokens * hidden, -2, 2, 6));
    const std::vector<float> w = RoundTrip(type, RandomFloats(hidden, 0.5, 1.5, 7));
    auto x_in_place = ToDevice(type, x), r_in_place = ToDevice(type, r);
    auto x_kept = ToDevice(type, x), r_separate = ToDevice(type, r), dw = ToDevice(type, w);
    DeviceBuffer out(tokens * hidden * elem);
    out.Fill(0xFF);
    FusedAddRmsNormParams in_place{
        x_in_place->get(), r_in_place->get(), dw->get(), tokens, hidden, 1e-6f, type};
    FusedAddRmsNormParams separate{
        x_kept->get(), r_separate->get(), dw->get(), tokens, hidden, 1e-6f, type, out.get()};
    PAGODA_ASSERT_CUDA_OK(LaunchFusedAddRmsNorm(in_place, nullptr));
    PAGODA_ASSERT_CUDA_OK(LaunchFusedAddRmsNorm(separate, nullptr));
    PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());
    const size_t bytes = tokens * hidden * elem;
    EXPECT_EQ(out.Download<uint8_t>(bytes), x_in_place->Download<uint8_t>(bytes));
    EXPECT_EQ(r_separate->Download<uint8_t>(bytes), r_in_place->Download<uint8_t>(bytes));
    EXPECT_EQ(x_kept->Download<uint8_t>(bytes), Encode(type, x));
    separate.out = separate.residual;
    EXPECT_EQ(LaunchFusedAddRmsNorm(separate, nullptr), cudaErrorInvalidValue);
  }
}

TEST_P(LayerOpsTest, RotaryEmbeddingRotatesHalvesInPlace) {
  const ScalarType type = GetParam();
  struct Case {
    int head_dim, rotary_dim, heads, kv_heads;
    RopeFrequencyScaling scaling;
  };
  RopeFrequencyScaling llama3;
  llama3.type = RopeFrequencyScaling::Type::kLlama3;
  llama3.factor = 8;
  llama3.original_max_position_embeddings = 64;
  RopeFrequencyScaling linear;
  linear.type = RopeFrequencyScaling::Type::kLinear;
  linear.factor = 2.5;
  // Halves of whole 16-byte vectors take the vector kernel (partial rotary
  // too); 36 (halves of 18) takes the element-wise one.
  for (const Case& c :
       {Case{64, 64, 5, 1, {}}, Case{128, 128, 4, 2, llama3}, Case{80, 80, 3, 3, linear},
        Case{96, 64, 2, 1, {}}, Case{36, 36, 3, 1, {}}}) {
    const int tokens = 13, max_position = 300;
    const std::vector<double> inv_freq = ComputeRopeInvFreq(c.rotary_dim, 500000.0, c.scaling);
    const std::vector<float> cache = BuildRopeCosSinCache(max_position, inv_freq);
    std::vector<int64_t> positions(tokens);
    std::mt19937 rng(c.head_dim);
    for (int64_t& pos : positions) pos = rng() % max_position;
    // q and k are slices of one fused QKV row.
    const int row = (c.heads + 2 * c.kv_heads) * c.head_dim;
    const std::vector<float> qkv = RoundTrip(type, RandomFloats(tokens * row, -1, 1, c.heads));
    auto d_qkv = ToDevice(type, qkv);
    DeviceBuffer d_cache(cache.size() * 4), d_pos(tokens * 8);
    d_cache.Upload(cache);
    d_pos.Upload(positions);
    const size_t elem = ScalarTypeSize(type);
    RotaryEmbeddingParams p;
    p.positions = d_pos.as<int64_t>();
    p.query = d_qkv->get();
    p.query_token_stride = row;
    p.key = static_cast<char*>(d_qkv->get()) + c.heads * c.head_dim * elem;
    p.key_token_stride = row;
    p.cos_sin_cache = d_cache.as<float>();
    p.num_tokens = tokens;
    p.num_heads = c.heads;
    p.num_kv_heads = c.kv_heads;
    p.head_dim = c.head_dim;
    p.rotary_dim = c.rotary_dim;
    p.dtype = type;
    PAGODA_ASSERT_CUDA_OK(LaunchRotaryEmbedding(p, nullptr));
    PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());

    std::vector<double> want(qkv.begin(), qkv.end());
    const int half = c.rotary_dim / 2;
    for (int t = 0; t < tokens; ++t) {
      for (int h = 0; h < c.heads + c.kv_heads; ++h) {  // q heads then k heads; v untouched
        double* x = &want[t * row + h * c.head_dim];
        for (int i = 0; i < half; ++i) {
          // inv_freq has linear's position scale folded in.
          const double angle = positions[t] * inv_freq[i];
          const double x1 = x[i], x2 = x[i + half];
          x[i] = x1 * std::cos(angle) - x2 * std::sin(angle);
          x[i + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
        }
      }
    }
    ExpectClose(FromDevice(type, *d_qkv, tokens * row), want, Tolerance(type));
  }
}

TEST_P(LayerOpsTest, SiluAndMulUsesGateThenUp) {
  const ScalarType type = GetParam();
  // 11 and 1377: the element-wise kernel; 14336 and 136: 16-byte vectors.
  for (const auto& [tokens, inter] : {std::pair{1, 11}, {6, 1377}, {3, 14336}, {5, 136}}) {
    const std::vector<float> x = RoundTrip(type, RandomFloats(tokens * 2 * inter, -6, 6, inter));
    auto dx = ToDevice(type, x);
    DeviceBuffer out(tokens * inter * ScalarTypeSize(type));
    out.Fill(0xFF);
    SiluAndMulParams p{dx->get(), out.get(), tokens, inter, type};
    PAGODA_ASSERT_CUDA_OK(LaunchSiluAndMul(p, nullptr));
    PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());
    std::vector<double> want(tokens * inter);
    for (int t = 0; t < tokens; ++t) {
      for (int i = 0; i < inter; ++i) {
        const double gate = x[t * 2 * inter + i], up = x[t * 2 * inter + inter + i];
        want[t * inter + i] = gate / (1.0 + std::exp(-gate)) * up;
      }
    }
    ExpectClose(FromDevice(type, out, tokens * inter), want, Tolerance(type));
  }
}

TEST_P(LayerOpsTest, EmbeddingCopiesRowsAndFlagsBadIds) {
  const ScalarType type = GetParam();
  for (const int hidden : {7, 64, 4095}) {
    const int vocab = 301;
    const std::vector<float> table = RoundTrip(type, RandomFloats(vocab * hidden, -1, 1, hidden));
    auto d_table = ToDevice(type, table);
    for (const bool with_bad_id : {false, true}) {
      std::vector<int32_t> ids = {0, 300, 17, 17, 150};
      if (with_bad_id) ids.insert(ids.begin() + 2, {301, -1});
      DeviceBuffer d_ids(ids.size() * 4), d_flag(4),
          out(ids.size() * hidden * ScalarTypeSize(type));
      d_ids.Upload(ids);
      d_flag.Upload(std::vector<int32_t>{0});
      out.Fill(0xFF);
      EmbeddingParams p{
          d_ids.as<int32_t>(),          d_table->get(), out.get(), d_flag.as<int32_t>(),
          static_cast<int>(ids.size()), hidden,         vocab,     type};
      PAGODA_ASSERT_CUDA_OK(LaunchEmbedding(p, nullptr));
      PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());
      std::vector<double> want(ids.size() * hidden, 0.0);
      for (size_t t = 0; t < ids.size(); ++t) {
        if (ids[t] < 0 || ids[t] >= vocab) continue;
        for (int i = 0; i < hidden; ++i) want[t * hidden + i] = table[ids[t] * hidden + i];
      }
      ExpectClose(FromDevice(type, out, ids.size() * hidden), want, 0.0);
      EXPECT_EQ(d_flag.Download<int32_t>(1)[0], with_bad_id ? 1 : 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, LayerOpsTest,
                         ::testing::Values(ScalarType::kF32, ScalarType::kF16, ScalarType::kBF16),
                         [](const auto& info) { return ScalarTypeName(info.param); });

}  // namespace
}  // namespace pagoda::kernels
