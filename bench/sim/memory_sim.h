#ifndef PAGODA_BENCH_SIM_MEMORY_SIM_H_
#define PAGODA_BENCH_SIM_MEMORY_SIM_H_

#include <cstdint>
#include <vector>

#include "bench/sim/step_time.h"
#include "bench/sim/trace.h"
#include "scheduler/engine/output_processor.h"

namespace pagoda::scheduler::sim {

// Averages over the steps of one simulated run.
struct MemoryStats {
  // Of the KV memory reserved (Orca) or allocated in blocks (Pagoda), the
  // share holding a computed token (paper Fig. 2).
  double token_share = 0;
  // Requests running (holding KV) in a step (paper Fig. 13). Pagoda steps
  // that only prefill (vLLM v0's policy) still count every running request.
  double mean_batched_requests = 0;
  // Blocks saved by sharing / blocks the same sequences would hold without
  // sharing (paper Fig. 15). Pagoda only.
  double sharing_saving = 0;
  int64_t num_steps = 0;
  int64_t num_preemptions = 0;
  int max_request_preemptions = 0;  // The most any one request was preempted.
  double simulated_seconds = 0;
};

struct SimConfig {
  int kv_tokens = kOpt13bKvTokens;
  int block_size = 16;
  int max_model_len = 2048;
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2560;
  bool avoid_thrashing = true;  // Pagoda's victim choice; false = vLLM's.
  StepTimeModel step_time;
};

// How each request decodes in the Pagoda run.
struct DecodeMode {
  int width = 1;  // n = best_of (parallel sampling) or beam width.
  bool beam_search = false;
};

// Replays `trace` through the real Scheduler, BlockManager and
// OutputProcessor; a fake worker returns random tokens (and random top
// logprobs for beam search), every sequence runs to its output length.
MemoryStats SimulatePagoda(const std::vector<TraceRequest>& trace, const SimConfig& config,
                           DecodeMode mode, uint64_t seed);

// Orca-style contiguous reservation, FCFS with iteration-level batching:
// a request is admitted when its reservation fits in what is left.
enum class OrcaReservation {
  kMax,     // max_model_len tokens.
  kPow2,    // The next power of two of its real length.
  kOracle,  // Exactly its real length (prompt + output).
};
MemoryStats SimulateOrca(const std::vector<TraceRequest>& trace, const SimConfig& config,
                         OrcaReservation reservation);

}  // namespace pagoda::scheduler::sim

#endif  // PAGODA_BENCH_SIM_MEMORY_SIM_H_
