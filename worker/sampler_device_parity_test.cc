// The host sampler (worker/sampler.h) against the CUDA sampler
// (kernels/ops/sampling.h) on the same logits: one rule, so the same tokens
// and top logprob ids. Built only with nvcc; skipped without a GPU.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/ops/sampling.h"
#include "kernels/ops/testing/cuda_test_util.h"
#include "worker/sampler.h"

namespace pagoda::worker {
namespace {

using kernels::testing::DeviceBuffer;
using kernels::testing::RandomFloats;

struct Case {
  std::vector<float> logits;  // [rows, vocab]
  std::vector<RowSamplingParams> rows;
};

Case MakeCase(int num_rows, int vocab, uint32_t seed) {
  Case c;
  c.logits = RandomFloats(static_cast<size_t>(num_rows) * vocab, -4, 4, seed);
  for (int r = 0; r < num_rows; ++r) {
    RowSamplingParams p;
    p.temperature = r % 7 == 0 ? 0.0f : 0.3f + 0.1f * (r % 12);
    p.top_k = r % 3 == 0 ? 1 + r % 50 : 0;
    p.top_p = r % 4 == 1 ? 0.5f + 0.04f * (r % 10) : 1.0f;
    p.seed = 1000003ull * (r + 1) + seed;
    p.sample_index = r % 5;
    p.num_logprobs = 4;
    c.rows.push_back(p);
  }
  return c;
}

TEST(SamplerDeviceParityTest, HostAndCudaDrawTheSameTokens) {
  PAGODA_SKIP_WITHOUT_CUDA();
  constexpr int kLogprobs = 4;
  int rows_checked = 0, mismatches = 0;
  for (const auto& [num_rows, vocab] :
       {std::pair{64, 1000}, std::pair{48, 32000}, std::pair{16, 151936}}) {
    const Case c = MakeCase(num_rows, vocab, static_cast<uint32_t>(vocab));
    std::vector<float> temperatures, top_p;
    std::vector<int32_t> top_k;
    std::vector<uint64_t> seeds, indices;
    for (const RowSamplingParams& p : c.rows) {
      temperatures.push_back(p.temperature);
      top_k.push_back(p.top_k);
      top_p.push_back(p.top_p);
      seeds.push_back(p.seed);
      indices.push_back(p.sample_index);
    }
    DeviceBuffer d_logits(c.logits.size() * 4), d_t(num_rows * 4), d_k(num_rows * 4),
        d_p(num_rows * 4), d_s(num_rows * 8), d_i(num_rows * 8), d_ids(num_rows * 4),
        d_top(num_rows * kLogprobs * 4), d_top_lp(num_rows * kLogprobs * 4);
    d_logits.Upload(c.logits);
    d_t.Upload(temperatures);
    d_k.Upload(top_k);
    d_p.Upload(top_p);
    d_s.Upload(seeds);
    d_i.Upload(indices);
    kernels::TokenSamplingParams params;
    params.logits = d_logits.as<float>();
    params.logits_stride = vocab;
    params.num_rows = num_rows;
    params.vocab_size = vocab;
    params.temperatures = d_t.as<float>();
    params.top_k = d_k.as<int32_t>();
    params.top_p = d_p.as<float>();
    params.seeds = d_s.as<uint64_t>();
    params.sample_indices = d_i.as<uint64_t>();
    params.num_logprobs = kLogprobs;
    params.sampled_ids = d_ids.as<int32_t>();
    params.top_ids = d_top.as<int32_t>();
    params.top_logprobs = d_top_lp.as<float>();
    PAGODA_ASSERT_CUDA_OK(kernels::LaunchTokenSampling(params, nullptr));
    PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());
    const std::vector<int32_t> device_ids = d_ids.Download<int32_t>(num_rows);
    const std::vector<int32_t> device_top = d_top.Download<int32_t>(num_rows * kLogprobs);

    for (int r = 0; r < num_rows; ++r) {
      int32_t token = -1;
      float logprob = 0.0f;
      std::vector<int32_t> top_ids(kLogprobs);
      std::vector<float> top_logprobs(kLogprobs);
      SampleRow(absl::MakeConstSpan(c.logits.data() + static_cast<size_t>(r) * vocab, vocab),
                c.rows[r],
                RowSampleOutput{.token_id = &token,
                                .logprob = &logprob,
                                .top_ids = absl::MakeSpan(top_ids),
                                .top_logprobs = absl::MakeSpan(top_logprobs)});
      ++rows_checked;
      mismatches += token != device_ids[r];
      EXPECT_EQ(top_ids, std::vector<int32_t>(device_top.begin() + r * kLogprobs,
                                              device_top.begin() + (r + 1) * kLogprobs))
          << "vocab " << vocab << " row " << r;
    }
  }
  // The devices' exp and log may differ in the last ulp, which can only flip
  // a near-tie of Gumbel scores or a top-p boundary: allow one in the lot.
  EXPECT_LE(mismatches, 1) << "of " << rows_checked << " rows";
}

}  // namespace
}  // namespace pagoda::worker
