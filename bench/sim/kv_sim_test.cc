#include <algorithm>

#include "bench/sim/memory_sim.h"
#include "bench/sim/trace.h"
#include "gtest/gtest.h"

namespace pagoda::scheduler::sim {
namespace {

TEST(TraceTest, LengthsFollowThePapersMeansAndRatios) {
  for (TraceKind kind : {TraceKind::kShareGpt, TraceKind::kAlpaca}) {
    const std::vector<TraceRequest> trace = SyntheticTrace(kind, 50, 200, 1 << 20, 3);
    ASSERT_NEAR(static_cast<double>(trace.size()), 10000, 400);  // Poisson: rate x duration.
    double prompt = 0, output = 0;
    for (const TraceRequest& request : trace) {
      prompt += request.prompt_len;
      output += request.output_len;
    }
    const LengthModel model = LengthModelOf(kind);
    EXPECT_NEAR(prompt / trace.size(), model.mean_prompt, 0.06 * model.mean_prompt);
    EXPECT_NEAR(output / trace.size(), model.mean_output, 0.06 * model.mean_output);
  }
  const LengthModel share = LengthModelOf(TraceKind::kShareGpt);
  const LengthModel alpaca = LengthModelOf(TraceKind::kAlpaca);
  EXPECT_NEAR(share.mean_prompt / alpaca.mean_prompt, 8.4, 0.1);
  EXPECT_NEAR(share.mean_output / alpaca.mean_output, 5.8, 0.1);
}

TEST(MemorySimTest, PagodaWastesLessAndBatchesMoreThanEveryOrcaPolicy) {
  const SimConfig config;
  const std::vector<TraceRequest> trace =
      SyntheticTrace(TraceKind::kShareGpt, 4.0, 120, config.max_model_len, 5);  // Memory-bound.
  const MemoryStats pagoda = SimulatePagoda(trace, config, DecodeMode{}, 5);
  const MemoryStats max = SimulateOrca(trace, config, OrcaReservation::kMax);
  const MemoryStats pow2 = SimulateOrca(trace, config, OrcaReservation::kPow2);
  const MemoryStats oracle = SimulateOrca(trace, config, OrcaReservation::kOracle);
  // Paged blocks waste at most one partial block per sequence.
  EXPECT_GT(pagoda.token_share, 0.9);
  EXPECT_GT(pagoda.token_share, oracle.token_share);
  EXPECT_GT(oracle.token_share, pow2.token_share);
  EXPECT_GT(pow2.token_share, max.token_share);
  EXPECT_GT(pagoda.mean_batched_requests, oracle.mean_batched_requests);
  EXPECT_GT(oracle.mean_batched_requests, max.mean_batched_requests);
  // Max reserves 2048 of 15000 tokens per request: at most 7 at a time.
  EXPECT_LE(max.mean_batched_requests, 7.0);
}

TEST(MemorySimTest, BeamSearchSharesMoreThanParallelSampling) {
  const SimConfig config;
  const std::vector<TraceRequest> trace =
      SyntheticTrace(TraceKind::kAlpaca, 10.0, 20, config.max_model_len, 7);
  const MemoryStats single = SimulatePagoda(trace, config, DecodeMode{}, 7);
  const MemoryStats parallel = SimulatePagoda(trace, config, DecodeMode{4, false}, 7);
  const MemoryStats beam = SimulatePagoda(trace, config, DecodeMode{4, true}, 7);
  EXPECT_EQ(single.sharing_saving, 0);
  EXPECT_GT(parallel.sharing_saving, 0.0);
  EXPECT_GT(beam.sharing_saving, parallel.sharing_saving);
}

}  // namespace
}  // namespace pagoda::scheduler::sim
