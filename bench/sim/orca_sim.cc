#include <algorithm>
#include <deque>

#include "bench/sim/memory_sim.h"

namespace pagoda::scheduler::sim {
namespace {

struct OrcaRequest {
  const TraceRequest* trace;
  int reserved;
  int generated = 0;
};

int ReservationOf(const TraceRequest& request, const SimConfig& config, OrcaReservation policy) {
  const int length = request.prompt_len + request.output_len;
  switch (policy) {
    case OrcaReservation::kMax:
      return config.max_model_len;
    case OrcaReservation::kPow2: {
      int pow2 = 1;
      while (pow2 < length) pow2 *= 2;
      return std::min(pow2, config.max_model_len);
    }
    case OrcaReservation::kOracle:
      return length;
  }
  return length;
}

}  // namespace

MemoryStats SimulateOrca(const std::vector<TraceRequest>& trace, const SimConfig& config,
                         OrcaReservation policy) {
  MemoryStats stats;
  std::deque<OrcaRequest> running;
  size_t next = 0;
  int reserved = 0;
  double now = 0;
  double share_sum = 0;
  double batch_sum = 0;
  while (next < trace.size() || !running.empty()) {
    if (running.empty() && trace[next].arrival_seconds > now) now = trace[next].arrival_seconds;
    // FCFS admission of arrived requests whose reservation fits.
    int64_t prefill_tokens = 0;
    while (next < trace.size() && trace[next].arrival_seconds <= now &&
           static_cast<int>(running.size()) < config.max_num_seqs &&
           prefill_tokens + trace[next].prompt_len <= config.max_num_batched_tokens) {
      const int need = ReservationOf(trace[next], config, policy);
      if (reserved + need > config.kv_tokens) break;
      reserved += need;
      prefill_tokens += trace[next].prompt_len;
      running.push_back(OrcaRequest{&trace[next], need});
      ++next;
    }
    // One step: every running request computes its next token.
    int64_t context = 0;
    for (OrcaRequest& request : running) {
      ++request.generated;
      context += request.trace->prompt_len + request.generated - 1;
    }
    share_sum += reserved == 0 ? 0 : static_cast<double>(context) / reserved;
    batch_sum += static_cast<double>(running.size());
    ++stats.num_steps;
    now += config.step_time.Seconds(context, prefill_tokens);
    std::erase_if(running, [&](const OrcaRequest& request) {
      if (request.generated < request.trace->output_len) return false;
      reserved -= request.reserved;
      return true;
    });
  }
  stats.token_share = share_sum / std::max<int64_t>(1, stats.num_steps);
  stats.mean_batched_requests = batch_sum / std::max<int64_t>(1, stats.num_steps);
  stats.simulated_seconds = now;
  return stats;
}

}  // namespace pagoda::scheduler::sim
