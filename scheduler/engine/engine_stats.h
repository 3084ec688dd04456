#ifndef PAGODA_SCHEDULER_ENGINE_ENGINE_STATS_H_
#define PAGODA_SCHEDULER_ENGINE_ENGINE_STATS_H_

// The engine's step and request records and its running totals
// (EngineSnapshot), and EngineObserver, through which /metrics and the
// benchmarks receive them.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace pagoda::scheduler {

// Where the wall time of engine steps goes: per step in StepRecord, summed
// over every step in EngineSnapshot. worker_rpc is the time spent in
// WorkerGroup::ExecuteStep minus the forward time the worker reported, i.e.
// serialisation, transport and waiting for the slowest rank.
struct StepSeconds {
  double schedule = 0;
  double worker_rpc = 0;
  double forward = 0;
  double all_reduce = 0;  // Part of forward (rank 0's).
  // Part of forward too: rank 0's wait, after its forward pass, for token
  // masks that follow the plan (structured outputs); the time the server's
  // mask computation did not hide behind the forward pass.
  double mask_wait = 0;
  double postprocess = 0;
  // The engine thread's CPU time in the step (its thread clock): the
  // server's host work, which no forward pass overlaps. A step's wall time
  // less the forward is this plus waiting (on the workers' channel, or for
  // cores a busy machine shares).
  double engine_cpu = 0;

  StepSeconds& operator+=(const StepSeconds& other) {
    schedule += other.schedule;
    worker_rpc += other.worker_rpc;
    forward += other.forward;
    all_reduce += other.all_reduce;
    mask_wait += other.mask_wait;
    postprocess += other.postprocess;
    engine_cpu += other.engine_cpu;
    return *this;
  }
};

// Sizes and timing of one engine iteration.
struct StepRecord {
  int64_t step_id = 0;
  int batch_size = 0;          // Sequences in the step.
  int num_batched_tokens = 0;  // Tokens computed in the step.
  int num_preempted = 0;
  int num_generated_tokens = 0;
  StepSeconds seconds;
  double total_seconds = 0;  // The whole step, start of scheduling to outputs processed.
};

// Life of one finished request, for latency metrics.
struct RequestRecord {
  std::string finish_reason;  // "stop", "length", "abort" or "error".
  int num_prompt_tokens = 0;
  int num_generated_tokens = 0;
  int max_tokens = 0;       // The most tokens the request asked for.
  int num_preemptions = 0;  // Times the request was preempted (thrashing shows here).
  absl::Time arrival_time;
  absl::Time first_scheduled_time = absl::InfinitePast();  // Past = never scheduled.
  absl::Time first_token_time = absl::InfinitePast();      // Past = no token.
  absl::Time finish_time;
};

// Speculative decoding's counters, as vLLM's SpecDecodingStats: a draft is
// one sequence's proposal in one step (k' >= 1 tokens); accepted tokens are
// the drafts the worker verified, before any stop check cut the run;
// accepted_per_pos[j] counts the drafts whose position j was accepted.
struct SpecDecodeTotals {
  int64_t num_drafts = 0;
  int64_t num_draft_tokens = 0;
  int64_t num_accepted_tokens = 0;
  std::vector<int64_t> accepted_per_pos;  // num_speculative_tokens entries.
};

// vllm:lora_requests_info's labels: the adapters (names, each once, in
// queue order) of the running and of the waiting requests, and --max-loras
// (0: LoRA off, and the metric is not exported).
struct LoraActivity {
  int max_loras = 0;
  std::vector<std::string> running;
  std::vector<std::string> waiting;
};

// State the engine publishes after every step; readable from any thread
// through Engine::snapshot(). The *_total fields only grow.
struct EngineSnapshot {
  bool healthy = true;
  bool accepting = true;
  int num_running = 0;
  int num_waiting = 0;  // Accepted, not running or swapped (as of the last step).
  int num_swapped = 0;
  int num_in_flight = 0;  // Accepted and not yet finished.
  int num_gpu_blocks = 0;
  int num_cpu_blocks = 0;
  int free_gpu_blocks = 0;
  int free_cpu_blocks = 0;
  int last_batch_size = 0;
  // Allocated KV slots of running sequences and those holding a token
  // (kv_slot_usage.h), as of the last step.
  int64_t kv_filled_slots = 0;
  int64_t kv_allocated_slots = 0;
  int64_t num_steps = 0;
  // Steps sent while the previous one still ran (overlapped scheduling).
  int64_t num_overlapped_steps = 0;
  int64_t num_preemptions_total = 0;
  int64_t prompt_tokens_total = 0;
  // Prompt tokens looked up in the prefix cache, and found there.
  int64_t prefix_cache_queries_total = 0;
  int64_t prefix_cache_hits_total = 0;
  int64_t generation_tokens_total = 0;
  int64_t batched_sequences_total = 0;
  StepSeconds seconds_total;
  SpecDecodeTotals spec_decode;  // All zero without --speculative-config.
  LoraActivity lora;
};

// Receives engine events (metrics). Called on the engine thread; must be
// quick and must not call back into the engine.
class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  virtual void OnStep(const StepRecord& step, const EngineSnapshot& snapshot) = 0;
  virtual void OnRequestFinished(const RequestRecord& record) = 0;
  // The workers were restarted and `requests_resumed` requests requeued for
  // recomputation; the recovery took `seconds`.
  virtual void OnWorkersRecovered(int requests_resumed, double seconds) {}
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_ENGINE_STATS_H_
