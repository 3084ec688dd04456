#ifndef PAGODA_SCHEDULER_ENGINE_ENGINE_H_
#define PAGODA_SCHEDULER_ENGINE_ENGINE_H_

// The engine: the loop that takes validated requests, asks the scheduler for
// each step, runs it on the worker group, applies the sampled tokens and
// delivers each request's progress to its sink.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "google/protobuf/arena.h"
#include "scheduler/engine/block_table_deltas.h"
#include "scheduler/engine/sampling_deltas.h"
#include "scheduler/engine/engine_stats.h"
#include "scheduler/engine/kv_slot_usage.h"
#include "scheduler/engine/lora_step.h"
#include "scheduler/engine/output_processor.h"
#include "scheduler/engine/request_sink.h"
#include "scheduler/engine/scheduler.h"
#include "scheduler/engine/sequence.h"
#include "scheduler/engine/speculation.h"
#include "scheduler/engine/step_pipeline.h"
#include "scheduler/lora/lora_registry.h"
#include "scheduler/spec/speculative_config.h"
#include "scheduler/workers/worker_group.h"

namespace pagoda::scheduler {

struct EngineConfig {
  SchedulerConfig scheduler;
  std::vector<int32_t> eos_token_ids;
  // The model's vocabulary (0: unknown): the width of a mask that carries
  // only multi-token bad words' ban, which lets such rows overlap
  // (step_pipeline.h); unknown, they sit out a step instead.
  int vocab_size = 0;
  // Accepted requests not yet running (inbox plus the scheduler's waiting
  // queue) beyond which AddRequest answers RESOURCE_EXHAUSTED.
  int max_queued_requests = 1024;
  // --speculative-config (ngram): drafts for running decodes each step
  // (speculation.h). Beam search requests are then refused, as vLLM does.
  std::optional<SpeculativeConfig> speculative;
  // Overlapped scheduling (step_pipeline.h): step N + 1 is planned and sent
  // while the workers run step N. Off: one step at a time.
  bool async_scheduling = true;
  // LoRA (docs/lora.md): the served adapters (the front door Acquires a
  // request's adapter before AddRequest; the engine Releases it once when
  // the request ends, however it ends) and --max-loras, the worker slots.
  // max_loras 0: LoRA off, and a request with a lora_id is refused.
  lora::LoraRegistry* lora_registry = nullptr;
  int max_loras = 0;
};

// A validated request, ready for the scheduler.
struct EngineRequest {
  std::string request_id;  // Non-empty.
  std::vector<int32_t> prompt_token_ids;
  SamplingOptions sampling;
  StoppingOptions stopping;
  absl::Time arrival_time = absl::Now();
  int priority = 0;  // Lower runs first under --scheduling-policy priority.
  // The LoraRegistry id of the request's adapter (0: the base model),
  // acquired by the caller. Accepted: the engine releases it when the
  // request ends; refused by AddRequest: the caller releases it.
  int lora_id = 0;
  std::shared_ptr<RequestSink> sink;  // Non-null.
};

// The single engine thread: owns the Scheduler (and its block manager) and
// the OutputProcessor, and drives the workers one step at a time. Frontend
// threads reach it only through AddRequest / AbortRequest, which put work in
// a mutex-protected inbox and wake the thread.
//
// A worker failure (a dead or unreachable worker, seen by a step or, while
// idle, within kWorkerCheckPeriod) makes the engine restart the workers
// (WorkerGroup::Recover) and resume every accepted request by recomputation;
// new requests are refused with UNAVAILABLE meanwhile. Only when the workers
// cannot come back does it fail every in-flight request with UNAVAILABLE and
// stay unhealthy for good.
//
// Thread-safe: every public method may be called from any thread.
class Engine {
 public:
  // `workers` must outlive the engine and must already have an initialised
  // cache of config.scheduler.num_gpu_blocks / num_cpu_blocks blocks.
  // `observer` may be null; otherwise it must outlive the engine.
  Engine(EngineConfig config, WorkerGroup* workers, EngineObserver* observer);
  ~Engine();  // Stop()s.
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Starts the engine thread. Call once.
  void Start();

  // Queues a request. Errors (and the sink is then never called):
  // ALREADY_EXISTS if a request with the same id is in flight,
  // RESOURCE_EXHAUSTED if the queue is full, UNAVAILABLE if the engine is
  // unhealthy, draining or stopped.
  absl::Status AddRequest(EngineRequest request);

  // Aborts an in-flight request: its sink gets OnFinish(CANCELLED) and its
  // blocks are freed at the next iteration. Unknown ids are ignored. With a
  // non-null `sink`, only the request that was added with that sink is
  // aborted: a late abort from a call whose request already ended (or was
  // refused) must not hit a newer request that reuses its client-chosen id.
  // `why` is only what the request's finish is counted as
  // (pagoda_request_success_total's finished_reason): a request the API
  // layer ended at a stop string finished with "stop", not "abort".
  enum class AbortCause { kCancelled, kStopString };
  void AbortRequest(const std::string& request_id, const RequestSink* sink = nullptr,
                    AbortCause why = AbortCause::kCancelled);

  // After LoraRegistry::Remove(name) returned `lora_id`: the engine frees
  // the adapter's worker slot and unloads it from every rank, between
  // steps and never under a step in flight that uses it. Unknown or
  // never-loaded ids are ignored.
  void ForgetLoraAdapter(int lora_id);

  // Refuses new requests from now on (drain); in-flight ones continue.
  void StopAccepting();

  // Waits until no request is in flight or `timeout` passed; true if idle.
  bool WaitUntilIdle(absl::Duration timeout);

  // Fails every remaining request with UNAVAILABLE and joins the thread.
  // Idempotent.
  void Stop();

  // Publishes the prefix cache's KV events (kv_events.h) to `sink` after
  // every step. Call before Start(); `sink` must outlive the engine. No-op
  // without prefix caching.
  void SetKvEventSink(KvEventSink* sink);

  // The hashes of the blocks the prefix cache can serve hits from, read on
  // the engine thread between steps; nullopt if it did not answer within
  // `timeout` (or is not running). For checking KV event subscribers.
  std::optional<std::vector<uint64_t>> CachedBlockHashes(absl::Duration timeout);

  bool healthy() const;
  // Why the engine is unhealthy ("" while healthy).
  std::string failure_reason() const;
  EngineSnapshot snapshot() const;

 private:
  // What the engine thread remembers about one accepted request.
  struct RequestState {
    std::shared_ptr<RequestSink> sink;
    RequestRecord record;
    int lora_id = 0;  // Released in the registry when the request ends.
  };
  // Accepted requests not yet running (see AddRequest).
  int NumQueuedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Accepted requests not yet in a snapshot as finished.
  int NumInFlightLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Loop();
  // One scheduling iteration, nano-vllm's schedule -> run -> postprocess with
  // the plan made explicit: ScheduleBatch -> BuildPlan -> ExecutePlan ->
  // ProcessOutputs -> PublishStep. Returns false when there was nothing to run.
  bool Step();
  // Step() with overlapped scheduling (engine_overlap.cc): sends the next
  // step, then processes the one before it while the new one runs.
  bool StepOverlapped();
  // Waits for the oldest step in flight and processes its tokens; on a
  // failure abandons every step in flight and handles it (false).
  bool FinishOldestStep();
  // Builds the token masks `step` promised and hands them to its sender
  // (once the step before it was processed); nothing if it promised none.
  void FulfilPromisedMasks(InFlightStep* step);
  // Waits for every step in flight and forgets them, undoing what was
  // planned past them (a worker failure, shutdown).
  void AbandonStepsInFlight();
  bool HasStepsInFlight() const { return pipeline_ != nullptr && !pipeline_->empty(); }
  // Drops a finished or aborted group, or keeps it until the steps in
  // flight that may point at it have answered.
  void RetireGroup(std::unique_ptr<SequenceGroup> group);
  struct ExecutedStep;  // The workers' result with its samples mapped.
  // Asks the scheduler for the next batch. Groups it can never schedule end
  // here (FinishIgnored), since no later step would take them either; the
  // batch's requests get their first-scheduled time (queue-time metric).
  SchedulerOutput ScheduleBatch(StepClock* clock);
  // A group that can never be scheduled: one that generated tokens and then
  // outgrew the KV cache or the step budget ends at "length" with them; a
  // prompt that never fitted fails with INVALID_ARGUMENT.
  void FinishIgnored(SequenceGroup& group);
  // The one message every worker receives, numbered so that server and
  // worker logs can be matched; it lives on `arena` (the step's).
  const pagoda::worker::v1::StepPlan& BuildPlan(const SchedulerOutput& output,
                                                google::protobuf::Arena* arena);
  // Runs the plan on the workers and maps rank 0's samples back onto the
  // batch. An error is a worker failure or a refused plan (HandleStepFailure
  // tells them apart).
  absl::StatusOr<ExecutedStep> ExecutePlan(const pagoda::worker::v1::StepPlan& plan,
                                           const SchedulerOutput& output, StepClock* clock);
  // A step that produced no tokens: dead workers are restarted and every
  // request resumes by recomputation (engine_recovery.cc); a plan that healthy
  // workers refused fails the requests it held (`failed`'s), and the others
  // (those only steps sent after it held, which were abandoned, or left out
  // of it) resume by recomputation.
  void HandleStepFailure(int64_t step_id, const absl::Status& status,
                         const SchedulerOutput& failed);
  // Appends the sampled tokens (and accepted drafts before them: stop
  // checks, forks, beams), streams each request's new tokens and ends the
  // requests that finished. Returns the number of tokens generated.
  // `accepted_drafts`: per sampled token, the drafts accepted before it
  // (null without speculation, which never runs overlapped).
  // `once_appended`, when given, runs as soon as the tokens are appended and
  // the stop checks done, before the rest (FinishOldestStep builds the next
  // step's masks there).
  int ProcessOutputs(const SchedulerOutput& output, const std::vector<GeneratedToken>& sampled,
                     const std::vector<std::vector<GeneratedToken>>* accepted_drafts,
                     absl::FunctionRef<void()> once_appended = [] {});
  // Hands each request its new tokens and records when its first one came
  // (`now`). Returns the number of tokens in `deltas`.
  int StreamDeltas(const std::vector<RequestDelta>& deltas, absl::Time now);
  // Frees the groups whose every sequence finished and answers their clients.
  void FinishCompletedRequests();
  // Records the step's sizes and timings and publishes the new snapshot, for
  // snapshot() readers and the metrics observer.
  void PublishStep(int64_t step_id, const SchedulerOutput& output,
                   const pagoda::worker::v1::StepResult& result, int generated,
                   const StepClock& clock);
  void AdmitRequests(std::vector<EngineRequest> requests);
  struct Abort {
    std::string request_id;
    const RequestSink* sink;  // Null: whichever request has the id.
    AbortCause why;
  };
  void ApplyAborts(const std::vector<Abort>& aborts);
  // LoRA (engine_lora.cc): an accepted request's adapter is released once,
  // when it ends; an unloaded adapter's slot is freed between steps.
  void ReleaseLora(int lora_id);
  void ForgetLoraAdapters(const std::vector<int>& lora_ids);
  // Before Schedule(): ends the requests of adapters the workers could not
  // load, then plans the slots and gates admission (lora_step.h).
  void PrepareLoraSlots();
  void FailLoraRequests(const std::vector<LoraStepper::FailedLoad>& failed);
  // Reports a request's end to its sink and observer and forgets it.
  void FinishRequest(const std::string& request_id, const absl::Status& status,
                     std::string_view finish_reason);
  // Fails every request the engine holds and those still in the inbox
  // (stop, workers that cannot be recovered).
  void FailAll(const absl::Status& status);
  void PublishSnapshot(const StepRecord* step);
  // Hands the events recorded since the last call to the KV event sink.
  void PublishKvEvents();
  struct HashQuery {
    std::vector<uint64_t> hashes;
    bool done = false;
  };
  // Answers the pending CachedBlockHashes calls.
  void AnswerHashQueries(std::vector<std::shared_ptr<HashQuery>> queries);
  // Worker failure (engine_recovery.cc): requeues every request for recomputation
  // and has the workers restarted; false if they cannot come back.
  bool RecoverWorkers();
  // The workers are gone for good: fail everything, refuse new requests.
  void FailForGood(const absl::Status& cause);

  const EngineConfig config_;
  WorkerGroup* const workers_;
  EngineObserver* const observer_;

  // Owned by the engine thread (and by Stop() after the thread has joined).
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<OutputProcessor> output_processor_;
  std::unique_ptr<Speculator> speculator_;  // Null without --speculative-config.
  std::unique_ptr<StepPipeline> pipeline_;  // Null without async scheduling.
  std::unique_ptr<LoraStepper> lora_;       // Null without LoRA (max_loras 0).
  absl::flat_hash_map<std::string, std::unique_ptr<RequestState>> requests_;
  int64_t next_seq_id_ = 0;
  int64_t next_step_id_ = 0;
  // The tables and sampling options the last plan sent, which the next
  // plan's rows extend or repeat; reset after any failed or abandoned step
  // and any worker restart.
  BlockTableDeltas table_deltas_;
  SamplingDeltas sampling_deltas_;
  // When the KV slot usage was last computed: it walks every block table, so
  // it is refreshed at most every kKvUsageRefresh rather than every step.
  absl::Time kv_usage_time_ = absl::InfinitePast();
  KvSlotUsageMeter kv_usage_meter_;
  bool workers_failed_ = false;            // A step failed; every request now fails.
  EngineSnapshot totals_;                  // Running counters, copied into snapshot_.
  KvEventSink* kv_event_sink_ = nullptr;
  KvEventBatch kv_events_;  // Swapped with the block manager's, then the sink's.
  bool kv_events_lost_ = false;  // The sink refused a batch: resync when it has room.

  mutable absl::Mutex mu_;
  std::vector<EngineRequest> inbox_ ABSL_GUARDED_BY(mu_);
  std::vector<Abort> abort_inbox_ ABSL_GUARDED_BY(mu_);
  std::vector<int> lora_forget_inbox_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<HashQuery>> hash_queries_ ABSL_GUARDED_BY(mu_);
  // Accepted and not yet finished; an id here cannot be submitted again.
  absl::flat_hash_set<std::string> in_flight_ids_ ABSL_GUARDED_BY(mu_);
  // Finished since the last snapshot: still in flight for idleness and the
  // counts until then, their blocks' release not yet published.
  int num_finishing_ ABSL_GUARDED_BY(mu_) = 0;
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
  bool healthy_ ABSL_GUARDED_BY(mu_) = true;
  std::string failure_reason_ ABSL_GUARDED_BY(mu_);
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  EngineSnapshot snapshot_ ABSL_GUARDED_BY(mu_);

  std::thread thread_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_ENGINE_H_
