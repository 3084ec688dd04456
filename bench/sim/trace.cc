#include "bench/sim/trace.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace pagoda::scheduler::sim {
namespace {

// A log-normal draw with the given mean: mu = ln(mean) - sigma^2 / 2.
int DrawLength(std::mt19937_64& rng, double mean, double sigma) {
  std::lognormal_distribution<double> length(std::log(mean) - sigma * sigma / 2, sigma);
  return std::max(1, static_cast<int>(std::lround(length(rng))));
}

}  // namespace

LengthModel LengthModelOf(TraceKind kind) {
  if (kind == TraceKind::kShareGpt) return LengthModel{161.3, 338.0, 1.0};
  return LengthModel{19.3, 58.5, 0.7};
}

std::string NameOf(TraceKind kind) { return kind == TraceKind::kShareGpt ? "ShareGPT" : "Alpaca"; }

std::vector<TraceRequest> SyntheticTrace(TraceKind kind, double rate, double duration_seconds,
                                         int max_model_len, uint64_t seed) {
  const LengthModel model = LengthModelOf(kind);
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  std::vector<TraceRequest> trace;
  for (double t = gap(rng); t < duration_seconds; t += gap(rng)) {
    TraceRequest request;
    request.arrival_seconds = t;
    request.prompt_len =
        std::min(DrawLength(rng, model.mean_prompt, model.sigma), max_model_len - 1);
    request.output_len = std::min(DrawLength(rng, model.mean_output, model.sigma),
                                  max_model_len - request.prompt_len);
    trace.push_back(request);
  }
  return trace;
}

}  // namespace pagoda::scheduler::sim
