// cuBLASLt linear layer against a float64 product on the host.

#include "kernels/ops/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "tests/kernels/cuda_test_util.h"

namespace pagoda::kernels {
namespace {

using testing::Decode;
using testing::DeviceBuffer;
using testing::Encode;
using testing::RandomFloats;
using testing::RoundTrip;

struct Shape {
  int64_t m, n, k;
  bool bias;
};

// Relative RMS error of c [m, n] against the float64 product of a [m, k]
// and w [n, k]^T, plus bias [n] when given. NaN anywhere makes it NaN.
double RelativeError(const std::vector<float>& a, const std::vector<float>& w,
                     const std::vector<float>& c, int64_t m, int64_t n, int64_t k,
                     const std::vector<float>* bias = nullptr) {
  double error = 0, norm = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double want = bias != nullptr ? (*bias)[j] : 0.0;
      for (int64_t l = 0; l < k; ++l) want += double{a[i * k + l]} * w[j * k + l];
      error += (c[i * n + j] - want) * (c[i * n + j] - want);
      norm += want * want;
    }
  }
  return std::sqrt(error / norm);
}

// Random bf16 operands a [m, k] and w [n, k] on the device, with their
// exact (rounded) values on the host.
struct Bf16Operands {
  Bf16Operands(int64_t m, int64_t n, int64_t k, uint32_t seed)
      : a(RoundTrip(ScalarType::kBF16, RandomFloats(m * k, -1, 1, seed))),
        w(RoundTrip(ScalarType::kBF16, RandomFloats(n * k, -1, 1, seed + 1))),
        da(a.size() * 2),
        dw(w.size() * 2) {
    da.Upload(Encode(ScalarType::kBF16, a));
    dw.Upload(Encode(ScalarType::kBF16, w));
  }
  std::vector<float> a, w;
  DeviceBuffer da, dw;
};

class GemmTest : public ::testing::TestWithParam<std::pair<ScalarType, ScalarType>> {};

TEST_P(GemmTest, MatchesFloat64Reference) {
  const auto [dtype, out_dtype] = GetParam();
  std::unique_ptr<GemmContext> context;
  ASSERT_EQ(GemmContext::Create(GemmContext::kDefaultWorkspaceBytes, &context),
            CUBLAS_STATUS_SUCCESS);
  for (const Shape& s : {Shape{1, 2048, 1024, false}, Shape{5, 136, 96, true},
                         Shape{33, 200, 264, true}, Shape{130, 72, 4096, false}}) {
    const std::vector<float> a = RoundTrip(dtype, RandomFloats(s.m * s.k, -1, 1, s.m + s.k));
    const std::vector<float> w = RoundTrip(dtype, RandomFloats(s.n * s.k, -1, 1, s.n));
    const std::vector<float> bias = RoundTrip(out_dtype, RandomFloats(s.n, -2, 2, 3));
    DeviceBuffer da(a.size() * 2), dw(w.size() * 2), dbias(bias.size() * 4),
        dc(s.m * s.n * ScalarTypeSize(out_dtype));
    da.Upload(Encode(dtype, a));
    dw.Upload(Encode(dtype, w));
    dbias.Upload(Encode(out_dtype, bias));
    dc.Fill(0xFF);
    GemmParams p{da.get(), dw.get(), s.bias ? dbias.get() : nullptr, dc.get(), s.m, s.n, s.k,
                 dtype,    out_dtype};
    ASSERT_EQ(Gemm(*context, p, nullptr), CUBLAS_STATUS_SUCCESS);
    PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());
    const std::vector<float> c =
        Decode(out_dtype, dc.Download<uint8_t>(s.m * s.n * ScalarTypeSize(out_dtype)));
    const double limit = out_dtype == ScalarType::kF32   ? 3e-5
                         : out_dtype == ScalarType::kF16 ? 2e-3
                                                         : 1e-2;
    EXPECT_LT(RelativeError(a, w, c, s.m, s.n, s.k, s.bias ? &bias : nullptr), limit)
        << s.m << "x" << s.n << "x" << s.k;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, GemmTest,
                         ::testing::Values(std::pair{ScalarType::kBF16, ScalarType::kBF16},
                                           std::pair{ScalarType::kF16, ScalarType::kF16},
                                           std::pair{ScalarType::kBF16, ScalarType::kF32}),
                         [](const auto& info) {
                           return std::string(ScalarTypeName(info.param.first)) + "_to_" +
                                  ScalarTypeName(info.param.second);
                         });

TEST(GemmTest, RowOffsetOperandsBelow256ByteAlignment) {
  // a and c start one row into bigger buffers (528 and 272 bytes in: 16-byte
  // but not 256-byte aligned), as slices of activations do.
  std::unique_ptr<GemmContext> context;
  ASSERT_EQ(GemmContext::Create(GemmContext::kDefaultWorkspaceBytes, &context),
            CUBLAS_STATUS_SUCCESS);
  const int64_t m = 7, n = 136, k = 264;
  const ScalarType type = ScalarType::kBF16;
  const std::vector<float> a = RoundTrip(type, RandomFloats((m + 1) * k, -1, 1, 11));
  const std::vector<float> w = RoundTrip(type, RandomFloats(n * k, -1, 1, 12));
  DeviceBuffer da(a.size() * 2), dw(w.size() * 2), dc((m + 1) * n * 2);
  da.Upload(Encode(type, a));
  dw.Upload(Encode(type, w));
  dc.Fill(0xFF);
  GemmParams p{static_cast<char*>(da.get()) + k * 2,
               dw.get(),
               nullptr,
               static_cast<char*>(dc.get()) + n * 2,
               m,
               n,
               k,
               type,
               type};
  ASSERT_EQ(Gemm(*context, p, nullptr), CUBLAS_STATUS_SUCCESS);
  PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> c = Decode(type, dc.Download<uint8_t>((m + 1) * n * 2));
  double error = 0, norm = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (int64_t l = 0; l < k; ++l) want += double{a[(i + 1) * k + l]} * w[j * k + l];
      const double got = c[(i + 1) * n + j];
      ASSERT_FALSE(std::isnan(got)) << i << "," << j;
      error += (got - want) * (got - want);
      norm += want * want;
    }
  }
  EXPECT_LT(std::sqrt(error / norm), 1e-2);
  EXPECT_TRUE(std::isnan(c[0]));  // the row before c untouched
}

TEST(GemmContextTest, RejectsUnsupportedTypesAndShapes) {
  std::unique_ptr<GemmContext> context;
  ASSERT_EQ(GemmContext::Create(1 << 20, &context), CUBLAS_STATUS_SUCCESS);
  DeviceBuffer buffer(4096);
  GemmParams p{buffer.get(),     buffer.get(),    nullptr, buffer.get(), 4, 4, 4,
               ScalarType::kF32, ScalarType::kF32};
  EXPECT_EQ(Gemm(*context, p, nullptr), CUBLAS_STATUS_INVALID_VALUE);
  p.dtype = ScalarType::kBF16;
  p.out_dtype = ScalarType::kF16;
  EXPECT_EQ(Gemm(*context, p, nullptr), CUBLAS_STATUS_INVALID_VALUE);
  p.out_dtype = ScalarType::kBF16;
  p.k = 0;
  EXPECT_EQ(Gemm(*context, p, nullptr), CUBLAS_STATUS_INVALID_VALUE);
}

TEST(GemmContextTest, RepeatedShapesReuseTheAlgorithmAndGiveTheSameBits) {
  std::unique_ptr<GemmContext> context;
  ASSERT_EQ(GemmContext::Create(GemmContext::kDefaultWorkspaceBytes, &context),
            CUBLAS_STATUS_SUCCESS);
  const int64_t m = 7, n = 96, k = 160;
  const std::vector<float> a = RandomFloats(m * k, -1, 1, 11), w = RandomFloats(n * k, -1, 1, 12);
  DeviceBuffer da(m * k * 2), dw(n * k * 2), dc(m * n * 4);
  da.Upload(Encode(ScalarType::kBF16, a));
  dw.Upload(Encode(ScalarType::kBF16, w));
  const GemmParams p{da.get(), dw.get(), nullptr,           dc.get(),        m,
                     n,        k,        ScalarType::kBF16, ScalarType::kF32};
  ASSERT_EQ(Gemm(*context, p, nullptr), CUBLAS_STATUS_SUCCESS);
  PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint8_t> first = dc.Download<uint8_t>(m * n * 4);
  EXPECT_EQ(context->num_cached_algos(), 1u);
  dc.Fill(0xFF);
  ASSERT_EQ(Gemm(*context, p, nullptr), CUBLAS_STATUS_SUCCESS);
  PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(dc.Download<uint8_t>(m * n * 4), first);
  EXPECT_EQ(context->num_cached_algos(), 1u);
  // Another m is another problem.
  GemmParams q = p;
  q.m = 3;
  ASSERT_EQ(Gemm(*context, q, nullptr), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(context->num_cached_algos(), 2u);
}

// One family's descriptors serve every row count and bias pointer: each
// call sets its own, and none leaks into the next.
TEST(GemmContextTest, DescriptorsAreKeptPerFamilyAcrossRowCountsAndBiases) {
  std::unique_ptr<GemmContext> context;
  ASSERT_EQ(GemmContext::Create(GemmContext::kDefaultWorkspaceBytes, &context),
            CUBLAS_STATUS_SUCCESS);
  const int64_t n = 96, k = 160, max_m = 9;
  const Bf16Operands in(max_m, n, k, 31);
  const std::vector<float> bias_one = RandomFloats(n, -2, 2, 33),
                           bias_two = RandomFloats(n, 5, 6, 34);
  DeviceBuffer dc((max_m + 1) * n * 4), db1(n * 4), db2(n * 4);
  db1.Upload(Encode(ScalarType::kF32, bias_one));
  db2.Upload(Encode(ScalarType::kF32, bias_two));
  struct Call {
    int64_t m;
    const std::vector<float>* bias;
    const void* device_bias;
  };
  for (const Call& call :
       {Call{7, nullptr, nullptr}, Call{3, nullptr, nullptr}, Call{9, &bias_one, db1.get()},
        Call{2, &bias_two, db2.get()}, Call{7, nullptr, nullptr}}) {
    dc.Fill(0xFF);
    const GemmParams p{in.da.get(), in.dw.get(), call.device_bias,  dc.get(),        call.m,
                       n,           k,           ScalarType::kBF16, ScalarType::kF32};
    ASSERT_EQ(Gemm(*context, p, nullptr), CUBLAS_STATUS_SUCCESS) << call.m;
    PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());
    const std::vector<float> c =
        Decode(ScalarType::kF32, dc.Download<uint8_t>((max_m + 1) * n * 4));
    EXPECT_LT(RelativeError(in.a, in.w, c, call.m, n, k, call.bias), 3e-5) << "m " << call.m;
    // The row after m untouched (still the 0xFF fill: NaN).
    EXPECT_TRUE(std::isnan(c[call.m * n])) << "m " << call.m;
  }
  // Two families: without bias and with.
  EXPECT_EQ(context->num_cached_descriptors(), 2u);
}

TEST(GemmContextTest, TimedAlgorithmsAreCorrectAndKept) {
  std::unique_ptr<GemmContext> context;
  ASSERT_EQ(GemmContext::Create(GemmContext::kDefaultWorkspaceBytes, &context),
            CUBLAS_STATUS_SUCCESS);
  context->set_timing(true);
  // A decode-shaped problem (few rows, a deep product: the heuristic offers
  // split-K candidates) and an odd one.
  for (const Shape& s : {Shape{64, 1024, 4096, false}, Shape{5, 136, 264, false}}) {
    const Bf16Operands in(s.m, s.n, s.k, 21);
    DeviceBuffer dc(s.m * s.n * 4);
    dc.Fill(0xFF);
    const GemmParams p{in.da.get(), in.dw.get(), nullptr,           dc.get(),        s.m,
                       s.n,         s.k,         ScalarType::kBF16, ScalarType::kF32};
    const size_t cached = context->num_cached_algos();
    ASSERT_EQ(Gemm(*context, p, nullptr), CUBLAS_STATUS_SUCCESS);
    PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());
    const std::vector<uint8_t> first = dc.Download<uint8_t>(s.m * s.n * 4);
    EXPECT_LT(RelativeError(in.a, in.w, Decode(ScalarType::kF32, first), s.m, s.n, s.k), 3e-5)
        << s.m << "x" << s.n << "x" << s.k;
    EXPECT_EQ(context->num_cached_algos(), cached + 1);
    // The pick is kept: the next call neither times nor changes a bit.
    const size_t timed = context->num_timed_algos();
    dc.Fill(0xFF);
    ASSERT_EQ(Gemm(*context, p, nullptr), CUBLAS_STATUS_SUCCESS);
    PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(dc.Download<uint8_t>(s.m * s.n * 4), first);
    EXPECT_EQ(context->num_timed_algos(), timed);
  }
  // The decode-shaped problem had candidates to time.
  EXPECT_GE(context->num_timed_algos(), 1u);
}

TEST(GemmContextTest, NeverTimesWhileCapturing) {
  std::unique_ptr<GemmContext> context;
  ASSERT_EQ(GemmContext::Create(GemmContext::kDefaultWorkspaceBytes, &context),
            CUBLAS_STATUS_SUCCESS);
  context->set_timing(true);
  const int64_t m = 64, n = 1024, k = 4096;
  DeviceBuffer da(m * k * 2), dw(n * k * 2), dc(m * n * 2);
  da.Fill(0x3c);
  dw.Fill(0x3b);
  cudaStream_t stream = nullptr;
  PAGODA_ASSERT_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  PAGODA_ASSERT_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  const GemmParams p{da.get(), dw.get(), nullptr,           dc.get(),         m,
                     n,        k,        ScalarType::kBF16, ScalarType::kBF16};
  const cublasStatus_t status = Gemm(*context, p, stream);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  EXPECT_EQ(status, CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(ended, cudaSuccess);
  if (graph != nullptr) cudaGraphDestroy(graph);
  EXPECT_EQ(context->num_timed_algos(), 0u);
  EXPECT_EQ(context->num_cached_algos(), 1u);
  PAGODA_ASSERT_CUDA_OK(cudaStreamDestroy(stream));
}

// Preferring no split-K: decode-shaped problems (Llama-3-8B's projections
// at batch 1 and 64, where the heuristic tends to split K) and an odd one
// give correct products with the kept pick, which the next call reuses
// without timing; while capturing nothing is timed.
TEST(GemmNoSplitKTest, PicksAreCorrectKeptAndNeverTimedWhileCapturing) {
  std::unique_ptr<GemmContext> context;
  ASSERT_EQ(GemmContext::Create(GemmContext::kDefaultWorkspaceBytes, &context),
            CUBLAS_STATUS_SUCCESS);
  context->set_prefer_no_split_k(true);
  // (n cut where the float64 reference would take seconds: the heuristic's
  // split-K choice follows m and k.)
  for (const Shape& s :
       {Shape{1, 4096, 4096, false}, Shape{64, 1536, 4096, false}, Shape{64, 512, 14336, false},
        Shape{1, 14336, 4096, false}, Shape{5, 136, 264, false}}) {
    const Bf16Operands in(s.m, s.n, s.k, 23);
    DeviceBuffer dc(s.m * s.n * 4);
    dc.Fill(0xFF);
    const GemmParams p{in.da.get(), in.dw.get(), nullptr,           dc.get(),        s.m,
                       s.n,         s.k,         ScalarType::kBF16, ScalarType::kF32};
    ASSERT_EQ(Gemm(*context, p, nullptr), CUBLAS_STATUS_SUCCESS);
    PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());
    const std::vector<uint8_t> first = dc.Download<uint8_t>(s.m * s.n * 4);
    EXPECT_LT(RelativeError(in.a, in.w, Decode(ScalarType::kF32, first), s.m, s.n, s.k), 3e-5)
        << s.m << "x" << s.n << "x" << s.k;
    const size_t replaced = context->num_no_split_k_algos();
    dc.Fill(0xFF);
    ASSERT_EQ(Gemm(*context, p, nullptr), CUBLAS_STATUS_SUCCESS);
    PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(dc.Download<uint8_t>(s.m * s.n * 4), first);
    EXPECT_EQ(context->num_no_split_k_algos(), replaced);
  }
  // How many split-K picks were replaced is the GPU's business; print it.
  std::printf("no-split-K picks replaced a split-K one in %zu of %zu problems\n",
              context->num_no_split_k_algos(), context->num_cached_algos());

  std::unique_ptr<GemmContext> capturing;
  ASSERT_EQ(GemmContext::Create(GemmContext::kDefaultWorkspaceBytes, &capturing),
            CUBLAS_STATUS_SUCCESS);
  capturing->set_prefer_no_split_k(true);
  const int64_t m = 64, n = 1024, k = 4096;
  DeviceBuffer da(m * k * 2), dw(n * k * 2), dc(m * n * 2);
  da.Fill(0x3c);
  dw.Fill(0x3b);
  cudaStream_t stream = nullptr;
  PAGODA_ASSERT_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  PAGODA_ASSERT_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  const GemmParams p{da.get(), dw.get(), nullptr,           dc.get(),         m,
                     n,        k,        ScalarType::kBF16, ScalarType::kBF16};
  const cublasStatus_t status = Gemm(*capturing, p, stream);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  EXPECT_EQ(status, CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(ended, cudaSuccess);
  if (graph != nullptr) cudaGraphDestroy(graph);
  EXPECT_EQ(capturing->num_no_split_k_algos(), 0u);
  EXPECT_EQ(capturing->num_cached_algos(), 1u);
  PAGODA_ASSERT_CUDA_OK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace pagoda::kernels
