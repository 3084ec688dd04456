// The host sampler (worker/sampler.h) against the CUDA sampler
// (kernels/ops/sampling.h) on the same logits: one rule, so the same tokens
// and top logprob ids. Built only with nvcc; skipped without a GPU.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/logits_processing.h"
#include "gtest/gtest.h"
#include "kernels/ops/logits_processing.h"
#include "kernels/ops/sampling.h"
#include "tests/kernels/cuda_test_util.h"
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

// Logits processing on both devices: penalties, logit_bias, masks and
// allowed ids (kernels/ops/logits_processing.h), then min_p in the sampler,
// against the host's in-place rule on the same rows.
TEST(SamplerDeviceParityTest, ProcessedRowsDrawTheSameTokens) {
  constexpr int kRows = 32, kVocab = 32000, kLogprobs = 2;
  const std::vector<float> logits = RandomFloats(size_t{kRows} * kVocab, -4, 4, 99);
  std::vector<float> temperatures, top_p, min_p;
  std::vector<int32_t> top_k, offsets = {0};
  std::vector<uint64_t> seeds, indices;
  std::vector<LogitPenalties> penalties;
  std::vector<LogitEdit> edits;
  std::vector<int32_t> mask_offsets;
  std::vector<uint32_t> masks;
  // Beam search's rows (every fourth, greedy): logprobs of the processed row.
  std::vector<uint8_t> processed_logprobs;
  for (int r = 0; r < kRows; ++r) {
    processed_logprobs.push_back(r % 4 == 0 ? 1 : 0);
    temperatures.push_back(r % 4 == 0 ? 0.0f : 0.5f + 0.1f * (r % 7));
    top_k.push_back(r % 3 == 0 ? 40 : 0);
    top_p.push_back(r % 5 == 1 ? 0.9f : 1.0f);
    min_p.push_back(r % 2 == 0 ? 0.02f * (r % 6) : 0.0f);
    seeds.push_back(7919ull * (r + 1));
    indices.push_back(r);
    penalties.push_back(LogitPenalties{.repetition = 1.0f + 0.1f * (r % 8),
                                       .frequency = 0.2f * (r % 3),
                                       .presence = -0.5f + 0.25f * (r % 5),
                                       .allowed_only = r % 9 == 4});
    // Edits on the row's largest logits (so they matter), one per token.
    const float* row = logits.data() + static_cast<size_t>(r) * kVocab;
    std::vector<int32_t> order(kVocab);
    for (int i = 0; i < kVocab; ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + 64, order.end(),
                      [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    std::sort(order.begin(), order.begin() + 64);
    for (int j = 0; j < 64; ++j) {
      edits.push_back(LogitEdit{.token_id = order[j],
                                .output_count = j % 4,
                                .bias = j % 5 == 0 ? 1.5f : 0.0f,
                                .flags = (j % 3 == 0 ? kLogitSeen : 0u) |
                                         (j % 11 == 0 ? kLogitBanned : 0u) |
                                         (j % 2 == 0 ? kLogitAllowed : 0u)});
    }
    offsets.push_back(static_cast<int32_t>(edits.size()));
    // Structured outputs: every third row draws from a token mask that
    // allows about a quarter of the vocabulary, the row's best among them.
    if (r % 3 == 2) {
      mask_offsets.push_back(static_cast<int32_t>(masks.size()));
      for (int w = 0; w < (kVocab + 31) / 32; ++w) {
        masks.push_back(0x11111111u << (r % 4) | (w == order[1] / 32 ? 1u << (order[1] % 32) : 0u));
      }
    } else {
      mask_offsets.push_back(-1);
    }
  }
  DeviceBuffer d_logits(logits.size() * 4), d_processed(logits.size() * 4), d_t(kRows * 4),
      d_k(kRows * 4), d_p(kRows * 4), d_m(kRows * 4), d_s(kRows * 8), d_i(kRows * 8),
      d_pen(kRows * sizeof(LogitPenalties)), d_off(offsets.size() * 4),
      d_edits(edits.size() * sizeof(LogitEdit)), d_ids(kRows * 4), d_top(kRows * kLogprobs * 4),
      d_top_lp(kRows * kLogprobs * 4), d_mask_offsets(kRows * 4), d_masks(masks.size() * 4),
      d_processed_logprobs(kRows);
  d_processed_logprobs.Upload(processed_logprobs);
  d_mask_offsets.Upload(mask_offsets);
  d_masks.Upload(masks);
  d_logits.Upload(logits);
  d_t.Upload(temperatures);
  d_k.Upload(top_k);
  d_p.Upload(top_p);
  d_m.Upload(min_p);
  d_s.Upload(seeds);
  d_i.Upload(indices);
  d_pen.Upload(penalties);
  d_off.Upload(offsets);
  d_edits.Upload(edits);
  PAGODA_ASSERT_CUDA_OK(kernels::LaunchLogitsProcessing(
      kernels::LogitsProcessingParams{.logits = d_logits.as<float>(),
                                      .logits_stride = kVocab,
                                      .num_rows = kRows,
                                      .vocab_size = kVocab,
                                      .penalties = d_pen.as<LogitPenalties>(),
                                      .edit_offsets = d_off.as<int32_t>(),
                                      .edits = d_edits.as<LogitEdit>(),
                                      .mask_offsets = d_mask_offsets.as<int32_t>(),
                                      .token_masks = d_masks.as<uint32_t>(),
                                      .processed = d_processed.as<float>()},
      nullptr));
  kernels::TokenSamplingParams params;
  params.logits = d_logits.as<float>();
  params.logits_stride = kVocab;
  params.num_rows = kRows;
  params.vocab_size = kVocab;
  params.temperatures = d_t.as<float>();
  params.top_k = d_k.as<int32_t>();
  params.top_p = d_p.as<float>();
  params.seeds = d_s.as<uint64_t>();
  params.sample_indices = d_i.as<uint64_t>();
  params.num_logprobs = kLogprobs;
  params.sampled_ids = d_ids.as<int32_t>();
  params.top_ids = d_top.as<int32_t>();
  params.top_logprobs = d_top_lp.as<float>();
  params.sampling_logits = d_processed.as<float>();
  params.processed_logprobs = d_processed_logprobs.as<uint8_t>();
  params.min_p = d_m.as<float>();
  PAGODA_ASSERT_CUDA_OK(kernels::LaunchTokenSampling(params, nullptr));
  PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<int32_t> device_ids = d_ids.Download<int32_t>(kRows);
  const std::vector<int32_t> device_top = d_top.Download<int32_t>(kRows * kLogprobs);
  const std::vector<float> device_top_logprobs = d_top_lp.Download<float>(kRows * kLogprobs);
  const std::vector<float> device_processed = d_processed.Download<float>(logits.size());
  int mismatches = 0;
  for (int r = 0; r < kRows; ++r) {
    std::vector<float> row(logits.begin() + static_cast<size_t>(r) * kVocab,
                           logits.begin() + static_cast<size_t>(r + 1) * kVocab);
    RowSamplingParams p{.temperature = temperatures[r],
                        .top_k = top_k[r],
                        .top_p = top_p[r],
                        .seed = seeds[r],
                        .sample_index = indices[r],
                        .num_logprobs = kLogprobs,
                        .min_p = min_p[r],
                        .penalties = penalties[r],
                        .edits = absl::MakeConstSpan(edits.data() + offsets[r],
                                                     edits.data() + offsets[r + 1]),
                        .processed_logprobs = processed_logprobs[r] != 0};
    if (mask_offsets[r] >= 0) {
      p.token_mask = absl::MakeConstSpan(masks.data() + mask_offsets[r], (kVocab + 31) / 32);
    }
    int32_t token = -1;
    float logprob = 0.0f;
    std::vector<int32_t> top_ids(kLogprobs);
    std::vector<float> top_logprobs(kLogprobs);
    SampleRowInPlace(absl::MakeSpan(row), p,
                     RowSampleOutput{.token_id = &token,
                                     .logprob = &logprob,
                                     .top_ids = absl::MakeSpan(top_ids),
                                     .top_logprobs = absl::MakeSpan(top_logprobs)});
    // The processed rows are the same floats (one rule, explicit fma).
    EXPECT_TRUE(std::equal(row.begin(), row.end(),
                           device_processed.begin() + static_cast<size_t>(r) * kVocab))
        << "row " << r;
    mismatches += token != device_ids[r];
    if (mask_offsets[r] >= 0) {
      EXPECT_TRUE(TokenMaskAllows(masks.data() + mask_offsets[r], device_ids[r])) << "row " << r;
      EXPECT_TRUE(TokenMaskAllows(masks.data() + mask_offsets[r], token)) << "row " << r;
    }
    // Top logprobs are the raw logits' on both, or the processed ones' on
    // both for beam search's rows.
    EXPECT_EQ(top_ids, std::vector<int32_t>(device_top.begin() + r * kLogprobs,
                                            device_top.begin() + (r + 1) * kLogprobs))
        << "row " << r;
    for (int i = 0; i < kLogprobs; ++i) {
      EXPECT_NEAR(top_logprobs[i], device_top_logprobs[r * kLogprobs + i], 1e-4)
          << "row " << r << " top " << i;
    }
  }
  EXPECT_LE(mismatches, 1) << "of " << kRows << " rows";
}

}  // namespace
}  // namespace pagoda::worker
