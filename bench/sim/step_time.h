#ifndef PAGODA_BENCH_SIM_STEP_TIME_H_
#define PAGODA_BENCH_SIM_STEP_TIME_H_

#include <cstdint>

namespace pagoda::scheduler::sim {

// Roofline time of one step of OPT-13B on one A100-40GB (the paper's Fig. 2
// and 13 setting): decode is bound by reading the weights (26 GB) and the
// KV cache of every context token (800 KB, paper §3) at half the 1.55 TB/s
// peak (what 2023 PyTorch engines achieved; it puts a step near 45 ms at
// the paper's batch of 30); prefill by 2 x 13e9 FLOP per prompt token at
// half of 312 TFLOP/s. A model, not a measurement: it only turns steps into
// seconds so that Poisson arrivals interleave with steps as they would.
struct StepTimeModel {
  double weight_bytes = 26e9;
  double kv_bytes_per_token = 800e3;
  double bandwidth = 0.5 * 1.55e12;
  double flops_per_prompt_token = 2 * 13e9;
  double flops = 0.5 * 312e12;

  double Seconds(int64_t context_tokens, int64_t prefill_tokens) const {
    return (weight_bytes + kv_bytes_per_token * static_cast<double>(context_tokens)) / bandwidth +
           flops_per_prompt_token * static_cast<double>(prefill_tokens) / flops;
  }
};

// KV capacity of that setting: 12 GB (paper Table 1) / 800 KB per token.
inline constexpr int kOpt13bKvTokens = 15000;

}  // namespace pagoda::scheduler::sim

#endif  // PAGODA_BENCH_SIM_STEP_TIME_H_
