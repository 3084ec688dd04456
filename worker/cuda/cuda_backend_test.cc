// CudaBackend ops against exact or host expectations (needs a GPU; skipped
// by exit code without one): block copy, swap out and in through a
// CacheEngine move exactly the named blocks of every layer, K and V; row
// gathering is exact; a half-precision Linear with an f32 bias matches a
// double reference to bf16 rounding; sampling through the backend gives the
// host sampler's greedy tokens and logprobs; an op on a wrong dtype is a
// sticky error; overlap's substitution of last sampled tokens writes exactly
// the counted rows.

#include "worker/cuda/cuda_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "worker/cache_engine.h"
#include "worker/cuda/cuda_backend_kernels.h"
#include "worker/sampler.h"

namespace pagoda::worker {
namespace {

std::unique_ptr<CudaBackend> MakeBackend() {
  auto backend = CudaBackend::Create(0, DType::kBF16);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? *std::move(backend) : nullptr;
}

uint16_t Bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

float FromBf16(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &bits, 4);
  return x;
}

// Each 16-bit element names its cache, block and offset, so any misplaced
// byte shows.
uint16_t Stamp(int cache, int block, size_t offset) {
  return static_cast<uint16_t>(cache * 7919 + block * 131 + offset);
}

TEST(CudaBackendTest, CopyAndSwapMoveExactlyTheNamedBlocksOfEveryCache) {
  auto backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  const KvCacheShape shape{
      .num_layers = 3, .num_kv_heads = 2, .block_size = 16, .head_dim = 64, .dtype = DType::kBF16};
  constexpr int kGpuBlocks = 10, kCpuBlocks = 6;
  CacheEngine cache(backend.get(), shape, kGpuBlocks, kCpuBlocks);
  const size_t per_block = shape.elements_per_layer_block();
  auto device_cache = [&](int c) {
    const KvCacheLayer layer = cache.layer(c % shape.num_layers);
    return c < shape.num_layers ? layer.key : layer.value;
  };
  for (int c = 0; c < 2 * shape.num_layers; ++c) {
    std::vector<uint16_t> host(per_block * kGpuBlocks);
    for (int b = 0; b < kGpuBlocks; ++b) {
      for (size_t i = 0; i < per_block; ++i) host[b * per_block + i] = Stamp(c, b, i);
    }
    backend->UploadBytes(host.data(), device_cache(c), host.size() * 2);
  }
  // Copy-on-write 1 -> 7 and 2 -> 8; swap out 3 -> host 5 and 4 -> host 0;
  // then swap host 5 -> 9 and host 0 -> 6.
  cache.Copy({BlockPair{1, 7}, BlockPair{2, 8}});
  cache.SwapOut({BlockPair{3, 5}, BlockPair{4, 0}});
  cache.SwapIn({BlockPair{5, 9}, BlockPair{0, 6}});
  backend->Synchronize();
  ASSERT_TRUE(backend->status().ok()) << backend->status();
  const int source_of[kGpuBlocks] = {0, 1, 2, 3, 4, 5, 4, 1, 2, 3};
  for (int c = 0; c < 2 * shape.num_layers; ++c) {
    std::vector<uint16_t> host(per_block * kGpuBlocks);
    backend->DownloadBytes(device_cache(c), host.data(), host.size() * 2);
    for (int b = 0; b < kGpuBlocks; ++b) {
      for (size_t i = 0; i < per_block; ++i) {
        ASSERT_EQ(host[b * per_block + i], Stamp(c, source_of[b], i))
            << "cache " << c << " block " << b << " element " << i;
      }
    }
    // The swap space holds what went out (pinned host memory).
    const auto* swap = static_cast<const uint16_t*>(
        c < shape.num_layers ? cache.cpu_key_cache(c)
                             : cache.cpu_value_cache(c - shape.num_layers));
    EXPECT_EQ(swap[5 * per_block + 17], Stamp(c, 3, 17));
    EXPECT_EQ(swap[0 * per_block + 3], Stamp(c, 4, 3));
  }
}

// CopyRows (cudaMemcpy2DAsync on the stream) against a plain host loop,
// over odd row widths and strides, bf16-sized and not: each row lands at
// its stride, and the bytes between rows keep their values.
TEST(CudaBackendTest, CopyRowsMatchesAPlainLoop) {
  auto backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  struct Shape {
    size_t row_bytes, src_stride, dst_stride;
    int rows;
  };
  for (const Shape& shape : {Shape{6, 6, 10, 7}, Shape{3, 11, 5, 1}, Shape{512, 512, 1024, 33},
                             Shape{512, 1536, 1536, 9}, Shape{5, 5, 5, 0}}) {
    const size_t rows = static_cast<size_t>(shape.rows);
    std::vector<uint8_t> src(std::max<size_t>(1, rows * shape.src_stride));
    std::vector<uint8_t> dst(std::max<size_t>(1, rows * shape.dst_stride));
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
    for (size_t i = 0; i < dst.size(); ++i) dst[i] = static_cast<uint8_t>(200 + i % 50);
    std::vector<uint8_t> want = dst;
    for (size_t r = 0; r < rows; ++r) {
      for (size_t b = 0; b < shape.row_bytes; ++b) {
        want[r * shape.dst_stride + b] = src[r * shape.src_stride + b];
      }
    }
    auto device_src = backend->Allocate(DType::kF32, (src.size() + 3) / 4);
    auto device_dst = backend->Allocate(DType::kF32, (dst.size() + 3) / 4);
    backend->UploadBytes(src.data(), device_src->raw(), src.size());
    backend->UploadBytes(dst.data(), device_dst->raw(), dst.size());
    backend->CopyRows(device_src->raw(), shape.src_stride, device_dst->raw(), shape.dst_stride,
                      shape.row_bytes, shape.rows);
    backend->DownloadBytes(device_dst->raw(), dst.data(), dst.size());
    ASSERT_TRUE(backend->status().ok()) << backend->status();
    EXPECT_EQ(dst, want) << shape.row_bytes << " bytes x " << shape.rows;
  }
}

TEST(CudaBackendTest, LinearWithF32BiasMatchesADoubleReference) {
  auto backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  constexpr int kRows = 5, kIn = 96, kOut = 80;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<uint16_t> x(kRows * kIn), w(kOut * kIn);
  std::vector<float> bias(kOut);
  for (auto& v : x) v = Bf16(dist(rng));
  for (auto& v : w) v = Bf16(dist(rng));
  for (auto& v : bias) v = dist(rng);
  auto dx = backend->Allocate(DType::kBF16, x.size());
  auto dw = backend->Allocate(DType::kBF16, w.size());
  auto db = backend->Allocate(DType::kF32, bias.size());
  auto dy = backend->Allocate(DType::kBF16, kRows * kOut);
  auto dlogits = backend->Allocate(DType::kF32, kRows * kOut);
  backend->UploadBytes(x.data(), dx->raw(), x.size() * 2);
  backend->UploadBytes(w.data(), dw->raw(), w.size() * 2);
  backend->UploadBytes(bias.data(), db->raw(), bias.size() * 4);
  const Tensor weight = Tensor::Of(*dw, {kOut, kIn});
  backend->Linear(dx->raw(), kRows, weight, db->data(), dy->raw(), DType::kBF16);
  backend->Linear(dx->raw(), kRows, weight, db->data(), dlogits->raw(), DType::kF32);
  std::vector<uint16_t> y(kRows * kOut);
  std::vector<float> logits(kRows * kOut);
  backend->DownloadBytes(dy->raw(), y.data(), y.size() * 2);
  backend->DownloadBytes(dlogits->raw(), logits.data(), logits.size() * 4);
  ASSERT_TRUE(backend->status().ok()) << backend->status();
  for (int r = 0; r < kRows; ++r) {
    for (int o = 0; o < kOut; ++o) {
      double want = bias[o];
      for (int i = 0; i < kIn; ++i)
        want += double{FromBf16(x[r * kIn + i])} * FromBf16(w[o * kIn + i]);
      EXPECT_NEAR(logits[r * kOut + o], want, 1e-3 * (1 + std::abs(want))) << r << "," << o;
      // One bf16 rounding of the product and one of the biased sum.
      EXPECT_NEAR(FromBf16(y[r * kOut + o]), want, 1.6e-2 * (1 + std::abs(want))) << r << "," << o;
    }
  }
}

TEST(CudaBackendTest, SampleMatchesTheHostSamplerAndGatherIsExact) {
  auto backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  constexpr int kRows = 3, kVocab = 1000, kLogprobs = 4;
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0, 3);
  std::vector<float> logits(kRows * kVocab);
  for (auto& v : logits) v = dist(rng);
  auto dlogits = backend->Allocate(DType::kF32, logits.size());
  backend->UploadBytes(logits.data(), dlogits->raw(), logits.size() * 4);
  // Greedy rows (temperature 0): parameters uploaded as SamplingBatch arrays.
  const std::vector<float> temperatures(kRows, 0.0f), top_p(kRows, 1.0f);
  const std::vector<int32_t> top_k(kRows, 0);
  const std::vector<uint64_t> seeds(kRows, 1), indices(kRows, 0);
  auto dt = backend->Allocate(DType::kF32, kRows);
  auto dp = backend->Allocate(DType::kF32, kRows);
  auto dk = backend->Allocate(DType::kF32, kRows);
  auto ds = backend->Allocate(DType::kF32, 2 * kRows);
  auto di = backend->Allocate(DType::kF32, 2 * kRows);
  backend->UploadBytes(temperatures.data(), dt->raw(), kRows * 4);
  backend->UploadBytes(top_p.data(), dp->raw(), kRows * 4);
  backend->UploadBytes(top_k.data(), dk->raw(), kRows * 4);
  backend->UploadBytes(seeds.data(), ds->raw(), kRows * 8);
  backend->UploadBytes(indices.data(), di->raw(), kRows * 8);
  SampleResults results;
  backend->Sample(Tensor::Of(*dlogits, {kRows, kVocab}),
                  SamplingBatch{.num_rows = kRows,
                                .temperatures = static_cast<const float*>(dt->raw()),
                                .top_k = static_cast<const int32_t*>(dk->raw()),
                                .top_p = static_cast<const float*>(dp->raw()),
                                .seeds = static_cast<const uint64_t*>(ds->raw()),
                                .sample_indices = static_cast<const uint64_t*>(di->raw()),
                                .num_logprobs = kLogprobs},
                  &results);
  ASSERT_TRUE(backend->status().ok()) << backend->status();
  ASSERT_EQ(results.num_logprobs, kLogprobs);
  for (int r = 0; r < kRows; ++r) {
    int32_t token = -1;
    float logprob = 0;
    std::vector<int32_t> top_ids(kLogprobs);
    std::vector<float> top_logprobs(kLogprobs);
    SampleRow(absl::MakeConstSpan(logits.data() + r * kVocab, kVocab),
              RowSamplingParams{.num_logprobs = kLogprobs},
              RowSampleOutput{.token_id = &token,
                              .logprob = &logprob,
                              .top_ids = absl::MakeSpan(top_ids),
                              .top_logprobs = absl::MakeSpan(top_logprobs)});
    EXPECT_EQ(results.token_ids[r], token);
    EXPECT_NEAR(results.logprobs[r], logprob, 1e-4);
    for (int i = 0; i < kLogprobs; ++i) {
      EXPECT_EQ(results.top_ids[r * kLogprobs + i], top_ids[i]);
      EXPECT_NEAR(results.top_logprobs[r * kLogprobs + i], top_logprobs[i], 1e-4);
    }
  }
  // GatherRows: rows 2 and 0 of a [3, 64] bf16 matrix, by device indices.
  std::vector<uint16_t> src(3 * 64);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint16_t>(i * 3 + 1);
  const std::vector<int32_t> rows = {2, 0};
  auto dsrc = backend->Allocate(DType::kBF16, src.size());
  auto drows = backend->Allocate(DType::kF32, rows.size());
  auto dout = backend->Allocate(DType::kBF16, 2 * 64);
  backend->UploadBytes(src.data(), dsrc->raw(), src.size() * 2);
  backend->UploadBytes(rows.data(), drows->raw(), rows.size() * 4);
  StepBatch batch;
  batch.logits_indices = static_cast<const int32_t*>(drows->raw());
  batch.num_logits_rows = 2;
  backend->GatherRows(dsrc->raw(), batch, 64, dout->raw());
  std::vector<uint16_t> out(2 * 64);
  backend->DownloadBytes(dout->raw(), out.data(), out.size() * 2);
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(out[i], src[2 * 64 + i]);
    EXPECT_EQ(out[64 + i], src[i]);
  }
}

TEST(CudaBackendTest, AWeightOfTheWrongDtypeIsAStickyError) {
  auto backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  auto w = backend->Allocate(DType::kF32, 64);
  auto x = backend->Allocate(DType::kBF16, 64);
  auto y = backend->Allocate(DType::kBF16, 64);
  backend->RmsNorm(x->raw(), Tensor::Of(*w, {64}), 1, 1e-6f, y->raw());
  EXPECT_EQ(backend->status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(backend->status().message().find("F32"), std::string::npos)
      << backend->status().message();
}

// Overlap's substitution against the plain host rule over odd sizes: the
// count comes from the device, slots past it and entries out of range
// write nothing.
TEST(CudaBackendTest, SubstituteLastSampledWritesExactlyTheCountedRows) {
  constexpr int kTokens = 37, kLast = 13, kCapacity = 300;
  std::mt19937 rng(3);
  std::vector<int32_t> tokens(kTokens), last(kLast), rows(kCapacity), sources(kCapacity);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 1000);
  for (int32_t& t : last) t = 1000 + static_cast<int32_t>(rng() % 1000);
  for (int i = 0; i < kCapacity; ++i) {
    rows[i] = static_cast<int32_t>(rng() % (kTokens + 2)) - 1;  // Some out of range.
    sources[i] = static_cast<int32_t>(rng() % (kLast + 2)) - 1;
  }
  const int32_t count = 257;  // Past one block of threads, below the capacity.
  std::vector<int32_t> expected = tokens;
  for (int i = 0; i < count; ++i) {
    if (rows[i] >= 0 && rows[i] < kTokens && sources[i] >= 0 && sources[i] < kLast) {
      expected[rows[i]] = last[sources[i]];
    }
  }
  // Device copies of host arrays, freed at the end of the test.
  std::vector<void*> allocations;
  auto to_device = [&](const std::vector<int32_t>& host) {
    void* device = nullptr;
    EXPECT_EQ(cudaMalloc(&device, host.size() * 4), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(device, host.data(), host.size() * 4, cudaMemcpyHostToDevice),
              cudaSuccess);
    allocations.push_back(device);
    return static_cast<int32_t*>(device);
  };
  int32_t* d_tokens = to_device(tokens);
  int32_t* d_last = to_device(last);
  int32_t* d_rows = to_device(rows);
  int32_t* d_sources = to_device(sources);
  int32_t* d_count = to_device({count});
  ASSERT_EQ(LaunchSubstituteLastSampled(d_tokens, kTokens, d_rows, d_sources, d_count, kCapacity,
                                        d_last, kLast, nullptr),
            cudaSuccess);
  std::vector<int32_t> got(kTokens);
  ASSERT_EQ(cudaMemcpy(got.data(), d_tokens, kTokens * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, expected);
  EXPECT_NE(got, tokens);
  for (void* device : allocations) cudaFree(device);
}

}  // namespace
}  // namespace pagoda::worker
