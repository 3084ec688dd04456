// pagoda-kv-sim: the vLLM paper's memory figures (Fig. 2, 13, 15) for
// Pagoda's real block manager and scheduler against Orca-style contiguous
// reservation, on synthetic ShareGPT-like and Alpaca-like traces (trace.h)
// with a roofline step-time model of OPT-13B on an A100 (step_time.h).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "bench/common/bench_flags.h"
#include "bench/sim/memory_sim.h"
#include "bench/sim/trace.h"

ABSL_FLAG(double, sharegpt_rate, 2.0, "ShareGPT-like arrivals per second (paper Fig. 13a: 2).");
ABSL_FLAG(double, alpaca_rate, 30.0, "Alpaca-like arrivals per second (paper Fig. 13b: 30).");
ABSL_FLAG(double, duration, 600, "Seconds of trace to replay (the paper uses one hour).");
ABSL_FLAG(double, sharing_rate, 10.0, "Alpaca-like arrivals per second for the sharing figures.");
ABSL_FLAG(double, sharing_duration, 120, "Seconds of trace for the sharing figures.");
ABSL_FLAG(uint64_t, seed, 1, "Seeds the traces and the fake worker.");

namespace pagoda::scheduler::sim {
namespace {

struct Anchor {
  const char* name;
  double paper_share;  // Fig. 2 (ShareGPT only); < 0 = not given.
  double paper_batch;
};

void PrintBatchingTable(TraceKind kind, double rate, double duration, uint64_t seed,
                        const std::vector<Anchor>& anchors) {
  const SimConfig config;
  const std::vector<TraceRequest> trace =
      SyntheticTrace(kind, rate, duration, config.max_model_len, seed);
  const LengthModel lengths = LengthModelOf(kind);
  std::printf(
      "\n%s-like trace: %zu requests at %.1f req/s over %.0f s (log-normal lengths, "
      "mean prompt %.1f, mean output %.1f tokens); KV pool %d tokens, block %d\n",
      NameOf(kind).c_str(), trace.size(), rate, duration, lengths.mean_prompt, lengths.mean_output,
      config.kv_tokens, config.block_size);
  std::printf("%-22s %10s %10s %12s %10s %12s %8s\n", "system", "KV share", "paper", "mean batch",
              "paper", "preemptions", "max/req");
  SimConfig vllm_victims = config;
  vllm_victims.avoid_thrashing = false;
  for (int i = 0; i < 5; ++i) {
    const MemoryStats stats =
        i == 0   ? SimulatePagoda(trace, config, DecodeMode{}, seed)
        : i == 4 ? SimulatePagoda(trace, vllm_victims, DecodeMode{}, seed)
                 : SimulateOrca(trace, config, static_cast<OrcaReservation>(i - 1));
    const std::string paper_share =
        anchors[i].paper_share < 0 ? "-" : absl::StrFormat("%.1f %%", anchors[i].paper_share);
    const std::string paper_batch =
        anchors[i].paper_batch < 0 ? "-" : absl::StrFormat("%.2f", anchors[i].paper_batch);
    std::printf("%-22s %8.1f %% %10s %12.2f %10s %12lld %8d\n", anchors[i].name,
                100 * stats.token_share, paper_share.c_str(), stats.mean_batched_requests,
                paper_batch.c_str(), static_cast<long long>(stats.num_preemptions),
                stats.max_request_preemptions);
  }
}

void PrintSharingTable(double rate, double duration, uint64_t seed) {
  const SimConfig config;
  const std::vector<TraceRequest> trace =
      SyntheticTrace(TraceKind::kAlpaca, rate, duration, config.max_model_len, seed);
  std::printf(
      "\nMemory saved by sharing (Alpaca-like, %zu requests at %.1f req/s; paper Fig. 15: "
      "parallel sampling 6.1-9.8 %%, beam search 37.6-55.2 %%)\n",
      trace.size(), rate);
  std::printf("%-8s %20s %20s\n", "width", "parallel sampling", "beam search");
  for (int width = 2; width <= 6; ++width) {
    const MemoryStats parallel = SimulatePagoda(trace, config, DecodeMode{width, false}, seed);
    const MemoryStats beam = SimulatePagoda(trace, config, DecodeMode{width, true}, seed);
    std::printf("%-8d %18.1f %% %18.1f %%\n", width, 100 * parallel.sharing_saving,
                100 * beam.sharing_saving);
  }
}

}  // namespace
}  // namespace pagoda::scheduler::sim

int main(int argc, char** argv) {
  pagoda::bench::ParseBenchCommandLine(
      argc, argv,
      {"pagoda-kv-sim", "pagoda-kv-sim [flags]: the vLLM paper's KV memory figures, simulated"});
  using pagoda::scheduler::sim::TraceKind;
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  const double duration = absl::GetFlag(FLAGS_duration);
  std::printf(
      "KV share: of the KV memory reserved (Orca) or allocated in blocks (Pagoda), the "
      "part holding a computed token (paper Fig. 2); mean batch: requests running (holding KV) "
      "per step (Fig. 13)\n");
  pagoda::scheduler::sim::PrintBatchingTable(TraceKind::kShareGpt,
                                             absl::GetFlag(FLAGS_sharegpt_rate), duration, seed,
                                             {{"Pagoda", 96.3, 30.42},
                                              {"Orca Max", 20.4, 7.00},
                                              {"Orca Pow2", 26.8, 9.81},
                                              {"Orca Oracle", 38.2, 13.62},
                                              {"Pagoda, vLLM's victims", 96.3, 30.42}});
  pagoda::scheduler::sim::PrintBatchingTable(TraceKind::kAlpaca, absl::GetFlag(FLAGS_alpaca_rate),
                                             duration, seed,
                                             {{"Pagoda", -1, 132.44},
                                              {"Orca Max", -1, 7.00},
                                              {"Orca Pow2", -1, 43.24},
                                              {"Orca Oracle", -1, 72.75},
                                              {"Pagoda, vLLM's victims", -1, 132.44}});
  pagoda::scheduler::sim::PrintSharingTable(absl::GetFlag(FLAGS_sharing_rate),
                                            absl::GetFlag(FLAGS_sharing_duration), seed);
  return 0;
}
