#ifndef PAGODA_BENCH_SIM_TRACE_H_
#define PAGODA_BENCH_SIM_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace pagoda::scheduler::sim {

// One request of a synthetic trace.
struct TraceRequest {
  double arrival_seconds;
  int prompt_len;
  int output_len;
};

// Length distributions synthesized from the vLLM paper (§6.1, Fig. 11): we
// have no dataset here, so lengths are log-normal with the means the paper's
// Fig. 11 reports (ShareGPT: prompts 161.3, outputs 338.0 tokens on
// average; Alpaca: 19.3 and 58.5 -- the 8.4x and 5.8x ratios of §6.1), a
// wider spread for ShareGPT ("higher variance"), clipped to [1, max_model_len]
// for the prompt plus output. Arrivals are Poisson at `rate` requests/s, as
// in the paper.
enum class TraceKind { kShareGpt, kAlpaca };

struct LengthModel {
  double mean_prompt;
  double mean_output;
  double sigma;  // Of the underlying normal.
};
LengthModel LengthModelOf(TraceKind kind);
std::string NameOf(TraceKind kind);

// Requests arriving in [0, duration_seconds). Deterministic for a seed.
std::vector<TraceRequest> SyntheticTrace(TraceKind kind, double rate, double duration_seconds,
                                         int max_model_len, uint64_t seed);

}  // namespace pagoda::scheduler::sim

#endif  // PAGODA_BENCH_SIM_TRACE_H_
