#include "scheduler/engine/engine.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "scheduler/engine/finish_reason.h"
#include "scheduler/engine/kv_slot_usage.h"
#include "scheduler/engine/output_processor.h"
#include "scheduler/engine/step_plan.h"

namespace pagoda::scheduler {

namespace {

// A gauge scraped every few seconds needs no per-step precision.
constexpr absl::Duration kKvUsageRefresh = absl::Milliseconds(100);

// How often an idle engine looks at its workers' health.
constexpr absl::Duration kWorkerCheckPeriod = absl::Milliseconds(200);

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

}  // namespace

Engine::Engine(EngineConfig config, WorkerGroup* workers, EngineObserver* observer)
    : config_(std::move(config)),
      workers_(workers),
      observer_(observer),
      scheduler_(std::make_unique<Scheduler>(config_.scheduler)),
      output_processor_(std::make_unique<OutputProcessor>(
          config_.eos_token_ids, config_.scheduler.max_model_len, scheduler_.get())) {
  if (config_.speculative.has_value()) {
    speculator_ = std::make_unique<Speculator>(*config_.speculative,
                                               config_.scheduler.max_model_len,
                                               config_.scheduler.max_num_batched_tokens,
                                               config_.eos_token_ids);
    const SpeculativeMethod method = config_.speculative->method;
    scheduler_->block_manager().set_recompute_last_cached_block(
        method == SpeculativeMethod::kEagle || method == SpeculativeMethod::kEagle3);
  }
  // Speculation and overlap do not run together (docs/extension-points.md):
  // each step's drafts come from the tokens the previous step returned.
  if (config_.async_scheduling && speculator_ == nullptr) {
    pipeline_ = std::make_unique<StepPipeline>(workers_);
  }
  if (config_.max_loras > 0 && config_.lora_registry != nullptr) {
    lora_ = std::make_unique<LoraStepper>(config_.max_loras, config_.lora_registry, workers_);
  }
  absl::MutexLock lock(&mu_);
  totals_.num_gpu_blocks = config_.scheduler.num_gpu_blocks;
  totals_.num_cpu_blocks = config_.scheduler.num_cpu_blocks;
  totals_.free_gpu_blocks = config_.scheduler.num_gpu_blocks;
  totals_.free_cpu_blocks = config_.scheduler.num_cpu_blocks;
  snapshot_ = totals_;
}

Engine::~Engine() { Stop(); }

void Engine::Start() {
  absl::MutexLock lock(&mu_);
  CHECK(!started_) << "Engine::Start called twice";
  started_ = true;
  LOG(INFO) << "engine: async scheduling " << (pipeline_ != nullptr ? "on" : "off");
  thread_ = std::thread([this] { Loop(); });
}

absl::Status Engine::AddRequest(EngineRequest request) {
  absl::MutexLock lock(&mu_);
  if (stop_requested_ || !accepting_) {
    return absl::UnavailableError("server is draining and accepts no new requests");
  }
  if (!healthy_ || !workers_->Healthy()) {
    return absl::UnavailableError(absl::StrCat(
        "workers are down; the server cannot serve requests",
        failure_reason_.empty() ? " now (restarting them)" : absl::StrCat(": ", failure_reason_)));
  }
  if (request.lora_id != 0 && (config_.max_loras <= 0 || config_.lora_registry == nullptr ||
                                request.lora_id < 0)) {
    return absl::InvalidArgumentError(
        "model: this server serves no LoRA adapters (start it with --enable-lora)");
  }
  if (speculator_ != nullptr && request.sampling.use_beam_search) {
    return absl::InvalidArgumentError(
        "use_beam_search: beam search cannot run with speculative decoding (--speculative-config)");
  }
  if (in_flight_ids_.contains(request.request_id)) {
    return absl::AlreadyExistsError(
        absl::StrCat("request_id: a request with id '", request.request_id, "' is in flight"));
  }
  if (NumQueuedLocked() >= config_.max_queued_requests) {
    return absl::ResourceExhaustedError(
        absl::StrCat("request queue is full (", config_.max_queued_requests, " requests waiting)"));
  }
  in_flight_ids_.insert(request.request_id);
  inbox_.push_back(std::move(request));
  return absl::OkStatus();
}

int Engine::NumQueuedLocked() const {
  // Everything accepted and not yet finished, less what the last snapshot saw
  // running or swapped. Requests the engine took from the inbox since that
  // snapshot count as waiting until the next one: inbox_ plus
  // snapshot_.num_waiting would miss them for a whole step, letting a burst
  // run past the limit and making the reported queue dip.
  return std::max(0, NumInFlightLocked() - snapshot_.num_running - snapshot_.num_swapped);
}

int Engine::NumInFlightLocked() const {
  return static_cast<int>(in_flight_ids_.size()) + num_finishing_;
}

void Engine::AbortRequest(const std::string& request_id, const RequestSink* sink,
                          AbortCause why) {
  absl::MutexLock lock(&mu_);
  if (in_flight_ids_.contains(request_id)) abort_inbox_.push_back(Abort{request_id, sink, why});
}

void Engine::ForgetLoraAdapter(int lora_id) {
  absl::MutexLock lock(&mu_);
  if (lora_id > 0) lora_forget_inbox_.push_back(lora_id);
}

void Engine::StopAccepting() {
  absl::MutexLock lock(&mu_);
  accepting_ = false;
  snapshot_.accepting = false;
}

bool Engine::WaitUntilIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return in_flight_ids_.empty() && num_finishing_ == 0;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

void Engine::Stop() {
  bool started;
  {
    absl::MutexLock lock(&mu_);
    stop_requested_ = true;
    accepting_ = false;
    started = started_;
    started_ = true;  // A later Start() is a bug; a later Stop() a no-op.
  }
  if (thread_.joinable()) {
    thread_.join();
  } else if (!started) {
    // Never started: answer what was queued all the same.
    FailAll(absl::UnavailableError("server is shutting down"));
    PublishSnapshot(nullptr);
  }
}

bool Engine::healthy() const {
  absl::MutexLock lock(&mu_);
  return healthy_ && workers_->Healthy();
}

EngineSnapshot Engine::snapshot() const {
  absl::MutexLock lock(&mu_);
  EngineSnapshot copy = snapshot_;
  copy.healthy = healthy_ && workers_->Healthy();
  copy.num_in_flight = NumInFlightLocked();
  copy.num_waiting = NumQueuedLocked();
  return copy;
}

void Engine::Loop() {
  while (true) {
    std::vector<EngineRequest> arrived;
    std::vector<Abort> aborts;
    std::vector<std::shared_ptr<HashQuery>> queries;
    std::vector<int> forgotten_loras;
    bool stop = false;
    {
      absl::MutexLock lock(&mu_);
      // Sleep until there is something to do. The scheduler's own queues are
      // only touched by this thread, so reading them here is safe.
      auto has_work = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stop_requested_ || !inbox_.empty() || !abort_inbox_.empty() ||
               !hash_queries_.empty() || !lora_forget_inbox_.empty() ||
               scheduler_->HasUnfinished() || HasStepsInFlight();
      };
      // Wakes now and then even when idle, to see a dead worker (engine_recovery.cc).
      mu_.AwaitWithTimeout(absl::Condition(&has_work), kWorkerCheckPeriod);
      arrived.swap(inbox_);
      aborts.swap(abort_inbox_);
      queries.swap(hash_queries_);
      forgotten_loras.swap(lora_forget_inbox_);
      stop = stop_requested_;
    }
    AnswerHashQueries(std::move(queries));
    AdmitRequests(std::move(arrived));
    ApplyAborts(aborts);
    ForgetLoraAdapters(forgotten_loras);
    if (stop) break;
    if (!workers_failed_ && !workers_->Healthy()) {
      AbandonStepsInFlight();  // They fail too; recovery replans them.
      if (!RecoverWorkers()) FailForGood(absl::UnavailableError(failure_reason()));
    }
    if (!scheduler_->HasUnfinished() && !HasStepsInFlight()) {
      if (lora_ != nullptr) lora_->ApplyForgets(/*step_in_flight=*/false);
      PublishSnapshot(nullptr);  // Aborts and refusals changed the counts.
      continue;
    }
    if (!Step()) {
      // Unfinished groups that cannot be scheduled now (should not happen with
      // the vLLM policy, which ignores what can never fit): avoid spinning.
      absl::MutexLock lock(&mu_);
      auto has_news = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stop_requested_ || !inbox_.empty() || !abort_inbox_.empty();
      };
      mu_.AwaitWithTimeout(absl::Condition(&has_news), absl::Milliseconds(5));
    }
  }
  AbandonStepsInFlight();
  // No load may run beside the workers' shutdown, which follows.
  if (lora_ != nullptr) lora_->loader().Quiesce();
  FailAll(absl::UnavailableError("server is shutting down"));
  PublishSnapshot(nullptr);
}

void Engine::AdmitRequests(std::vector<EngineRequest> requests) {
  for (EngineRequest& request : requests) {
    auto state = std::make_unique<RequestState>();
    state->sink = std::move(request.sink);
    state->record.arrival_time = request.arrival_time;
    state->record.num_prompt_tokens = static_cast<int>(request.prompt_token_ids.size());
    state->record.max_tokens = request.stopping.max_tokens;
    state->lora_id = request.lora_id;
    auto group = std::make_unique<SequenceGroup>(
        request.request_id, std::move(request.prompt_token_ids), next_seq_id_, request.sampling,
        request.stopping, request.arrival_time);
    group->set_priority(request.priority);
    group->set_lora_id(request.lora_id);
    ++next_seq_id_;  // Forked sequences get their ids from the scheduler.
    requests_[request.request_id] = std::move(state);
    if (workers_failed_) {
      FinishRequest(request.request_id,
                    absl::UnavailableError("workers are down; the server cannot serve requests"),
                    kFinishReasonError);
      continue;
    }
    scheduler_->AddSequenceGroup(std::move(group));
  }
}

void Engine::ApplyAborts(const std::vector<Abort>& aborts) {
  for (const Abort& abort : aborts) {
    const std::string& id = abort.request_id;
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;  // Already finished.
    // Another request with the same id (the aborting call's own ended).
    if (abort.sink != nullptr && it->second->sink.get() != abort.sink) continue;
    // Its blocks were freed by AbortRequest; a step in flight may still
    // hold its rows (their tokens are dropped when it answers).
    std::unique_ptr<SequenceGroup> group = scheduler_->AbortRequest(id);
    FinishRequest(id, absl::CancelledError("request cancelled"),
                  FinishReasonName(abort.why == AbortCause::kStopString
                                       ? pagoda::v1::FINISH_REASON_STOP
                                       : pagoda::v1::FINISH_REASON_ABORTED));
    if (group != nullptr) RetireGroup(std::move(group));
  }
}

// What the workers returned for a plan, mapped onto the scheduled entries.
struct Engine::ExecutedStep {
  pagoda::worker::v1::StepResult result;
  std::vector<GeneratedToken> sampled;
  std::vector<StepPromptLogprobs> prompt_logprobs;
  std::vector<std::vector<GeneratedToken>> accepted_drafts;  // Per sampled token.
};

bool Engine::Step() {
  if (pipeline_ != nullptr) return StepOverlapped();  // engine_overlap.cc
  StepClock clock;
  clock.start = absl::Now();
  SchedulerOutput output = ScheduleBatch(&clock);
  if (output.empty()) {
    PublishSnapshot(nullptr);
    return !output.ignored.empty();
  }
  google::protobuf::Arena arena(StepArenaOptions());
  const pagoda::worker::v1::StepPlan& plan = BuildPlan(output, &arena);
  absl::StatusOr<ExecutedStep> executed = ExecutePlan(plan, output, &clock);
  if (!executed.ok()) {
    HandleStepFailure(plan.step_id(), executed.status(), output);
    PublishSnapshot(nullptr);
    return true;
  }
  for (StepPromptLogprobs& scored : executed->prompt_logprobs) {
    scored.group->prompt_logprobs().Add(scored.first_position, std::move(scored.entries));
  }
  const int generated = ProcessOutputs(
      output, executed->sampled, speculator_ != nullptr ? &executed->accepted_drafts : nullptr);
  clock.end = absl::Now();
  PublishStep(plan.step_id(), output, executed->result, generated, clock);
  return true;
}

SchedulerOutput Engine::ScheduleBatch(StepClock* clock) {
  if (speculator_ != nullptr) speculator_->Propose(*scheduler_);
  if (lora_ != nullptr) PrepareLoraSlots();  // engine_lora.cc
  SchedulerOutput output = scheduler_->Schedule();
  if (lora_ != nullptr) lora_->AfterSchedule(*scheduler_);
  if (speculator_ != nullptr) speculator_->TakeScheduled(output);
  clock->scheduled = absl::Now();
  for (std::unique_ptr<SequenceGroup>& group : output.ignored) FinishIgnored(*group);
  for (const ScheduledSequence& scheduled : output.scheduled) {
    // A group is first scheduled with a prompt chunk: decode rows, most of
    // a step's, skip the lookup by request id.
    if (scheduled.start_position >= scheduled.seq->num_prompt_tokens()) continue;
    auto it = requests_.find(scheduled.group->request_id());
    if (it != requests_.end() && it->second->record.first_scheduled_time == absl::InfinitePast()) {
      it->second->record.first_scheduled_time = clock->scheduled;
    }
  }
  return output;
}

void Engine::FinishIgnored(SequenceGroup& group) {
  if (std::optional<RequestDelta> last = CutShortDelta(group)) {
    auto it = requests_.find(group.request_id());
    if (it != requests_.end()) it->second->record.num_preemptions = group.num_preemptions();
    StreamDeltas({std::move(*last)}, absl::Now());
    FinishRequest(group.request_id(), absl::OkStatus(),
                  FinishReasonName(pagoda::v1::FINISH_REASON_LENGTH));
    return;
  }
  const int prompt_len = group.seqs().empty() ? 0 : group.seqs()[0]->num_prompt_tokens();
  FinishRequest(
      group.request_id(),
      absl::InvalidArgumentError(absl::StrCat(
          "prompt: ", prompt_len, " tokens can never be scheduled: too long for the KV cache (",
          config_.scheduler.num_gpu_blocks, " blocks of ", config_.scheduler.block_size,
          " tokens) or the token budget (max_num_batched_tokens ",
          config_.scheduler.max_num_batched_tokens, ")")),
      kFinishReasonError);
}

const pagoda::worker::v1::StepPlan& Engine::BuildPlan(const SchedulerOutput& output,
                                                      google::protobuf::Arena* arena) {
  auto* plan = google::protobuf::Arena::CreateMessage<pagoda::worker::v1::StepPlan>(arena);
  BuildStepPlanInto(next_step_id_++, output, scheduler_->block_manager(), config_.eos_token_ids,
                    plan, &table_deltas_, &sampling_deltas_);
  if (speculator_ != nullptr) speculator_->AttachDrafts(output, *plan);
  if (lora_ != nullptr) lora_->AttachSlots(output, *plan);
  return *plan;
}

absl::StatusOr<Engine::ExecutedStep> Engine::ExecutePlan(const pagoda::worker::v1::StepPlan& plan,
                                                         const SchedulerOutput& output,
                                                         StepClock* clock) {
  clock->rpc_start = absl::Now();
  // The token masks the plan promises are computed while the workers run
  // the forward pass (only their samplers wait for them).
  absl::StatusOr<pagoda::worker::v1::StepResult> result = workers_->ExecuteStep(plan, [&] {
    return BuildStepMasks(plan, output, config_.eos_token_ids, config_.vocab_size);
  });
  clock->rpc_end = absl::Now();
  if (!result.ok()) return result.status();
  absl::StatusOr<std::vector<GeneratedToken>> sampled = ExtractSampledTokens(*result, output);
  if (!sampled.ok()) return sampled.status();
  absl::StatusOr<std::vector<StepPromptLogprobs>> prompt_logprobs =
      ExtractPromptLogprobs(*result, plan, output);
  if (!prompt_logprobs.ok()) return prompt_logprobs.status();
  ExecutedStep executed{*std::move(result), *std::move(sampled), *std::move(prompt_logprobs), {}};
  if (speculator_ != nullptr) {
    absl::StatusOr<std::vector<std::vector<GeneratedToken>>> accepted =
        speculator_->ExtractAccepted(executed.result, output);
    if (!accepted.ok()) return accepted.status();
    executed.accepted_drafts = *std::move(accepted);
  }
  return executed;
}

int Engine::ProcessOutputs(const SchedulerOutput& output,
                           const std::vector<GeneratedToken>& sampled,
                           const std::vector<std::vector<GeneratedToken>>* accepted_drafts,
                           absl::FunctionRef<void()> once_appended) {
  // Prompt tokens computed this step (read before Process grows the sequences).
  for (const ScheduledSequence& scheduled : output.scheduled) {
    const int prompt_left = scheduled.seq->num_prompt_tokens() - scheduled.start_position;
    if (prompt_left > 0) totals_.prompt_tokens_total += std::min(prompt_left, scheduled.num_tokens);
  }
  const absl::Time now = absl::Now();
  std::vector<RequestDelta> deltas = output_processor_->Process(output, sampled, accepted_drafts);
  once_appended();
  scheduler_->CommitComputedBlocks(output);
  if (speculator_ != nullptr) {
    speculator_->ReleaseRejectedSlots(output, scheduler_->block_manager());
  }
  const int generated = StreamDeltas(deltas, now);
  FinishCompletedRequests();
  return generated;
}

int Engine::StreamDeltas(const std::vector<RequestDelta>& deltas, absl::Time now) {
  int generated = 0;
  for (const RequestDelta& delta : deltas) {
    auto it = requests_.find(delta.request_id);
    if (it == requests_.end()) continue;
    RequestState& state = *it->second;
    int new_tokens = 0;
    for (const RequestDelta::SeqDelta& seq : delta.seqs) {
      new_tokens += static_cast<int>(seq.new_tokens.size());
      if (IsFinished(seq.status)) state.record.finish_reason = MetricFinishReason(seq.status);
    }
    if (new_tokens > 0 && state.record.first_token_time == absl::InfinitePast()) {
      state.record.first_token_time = now;
    }
    state.record.num_generated_tokens += new_tokens;
    generated += new_tokens;
    state.sink->OnDelta(delta);
  }
  return generated;
}

void Engine::FinishCompletedRequests() {
  for (std::unique_ptr<SequenceGroup>& group : scheduler_->FreeFinished()) {
    auto it = requests_.find(group->request_id());
    if (it != requests_.end()) {
      it->second->record.num_preemptions = group->num_preemptions();
      std::string reason = it->second->record.finish_reason;
      if (reason.empty()) reason = MetricFinishReason(group->seqs().front()->status());
      FinishRequest(group->request_id(), absl::OkStatus(), reason);
    }
    RetireGroup(std::move(group));
  }
}

void Engine::PublishStep(int64_t step_id, const SchedulerOutput& output,
                         const pagoda::worker::v1::StepResult& result, int generated,
                         const StepClock& clock) {
  StepRecord step;
  step.step_id = step_id;
  step.batch_size = static_cast<int>(output.scheduled.size());
  step.num_batched_tokens = output.num_batched_tokens;
  step.num_preempted = output.num_preempted;
  step.num_generated_tokens = generated;
  step.seconds.schedule = Seconds(clock.scheduled - clock.start);
  step.seconds.forward = result.forward_seconds();
  step.seconds.all_reduce = result.all_reduce_seconds();
  step.seconds.mask_wait = result.mask_wait_seconds();
  step.seconds.worker_rpc =
      std::max(0.0, Seconds(clock.rpc_end - clock.rpc_start) - step.seconds.forward);
  step.seconds.postprocess = Seconds(clock.end - clock.rpc_end);
  step.seconds.engine_cpu = std::max(0.0, ThreadCpuSeconds() - clock.start_cpu_seconds);
  step.total_seconds = Seconds(clock.end - clock.start);
  PublishSnapshot(&step);
}

void Engine::FinishRequest(const std::string& request_id, const absl::Status& status,
                           std::string_view finish_reason) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  std::unique_ptr<RequestState> state = std::move(it->second);
  requests_.erase(it);
  state->record.finish_reason = finish_reason;
  state->record.finish_time = absl::Now();
  ReleaseLora(state->lora_id);
  // Metrics first: a client that has its final response must find the
  // request counted (the response can reach it before the next line runs).
  if (observer_ != nullptr) observer_->OnRequestFinished(state->record);
  {
    // The id is free before the final response goes out, as in vLLM (its
    // output processor drops a finished request's state before yielding its
    // last output): a client may reuse it as soon as it has that response.
    // The request still counts as in flight (num_finishing_) until the next
    // snapshot, so that a waiter who sees the engine idle also sees the
    // blocks it freed.
    absl::MutexLock lock(&mu_);
    in_flight_ids_.erase(request_id);
    ++num_finishing_;
  }
  state->sink->OnFinish(status);
}

void Engine::FailAll(const absl::Status& status) {
  // Frees the blocks of everything the scheduler holds.
  std::vector<std::unique_ptr<SequenceGroup>> groups = scheduler_->AbortAll();
  std::vector<std::string> ids;
  ids.reserve(requests_.size());
  for (const auto& [id, state] : requests_) ids.push_back(id);
  for (const std::string& id : ids) FinishRequest(id, status, kFinishReasonError);
  // Requests that arrived after the last drain of the inbox.
  std::vector<EngineRequest> late;
  {
    absl::MutexLock lock(&mu_);
    late.swap(inbox_);
    abort_inbox_.clear();
    for (const EngineRequest& request : late) in_flight_ids_.erase(request.request_id);
  }
  for (EngineRequest& request : late) {
    ReleaseLora(request.lora_id);
    request.sink->OnFinish(status);
  }
}

void Engine::SetKvEventSink(KvEventSink* sink) {
  scheduler_->block_manager().EnableKvEvents();
  if (scheduler_->block_manager().kv_events_enabled()) kv_event_sink_ = sink;
}

void Engine::PublishKvEvents() {
  if (kv_event_sink_ == nullptr) return;
  BlockManager& blocks = scheduler_->block_manager();
  blocks.SwapKvEvents(kv_events_);
  // After a refused batch the subscribers' view is wrong: the whole cache
  // replaces whatever happened since.
  if (kv_events_lost_) kv_events_ = blocks.CachedBlocksAsEvents();
  if (kv_events_.empty()) return;
  kv_events_lost_ = !kv_event_sink_->TryPublish(kv_events_);
  kv_events_.Clear();  // Refused: dropped (else already the sink's empty one).
}

std::optional<std::vector<uint64_t>> Engine::CachedBlockHashes(absl::Duration timeout) {
  auto query = std::make_shared<HashQuery>();
  absl::MutexLock lock(&mu_);
  if (stop_requested_ || !thread_.joinable()) return std::nullopt;
  hash_queries_.push_back(query);
  auto answered = [&query]() { return query->done; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&answered), timeout)) return std::nullopt;
  return query->hashes;
}

void Engine::AnswerHashQueries(std::vector<std::shared_ptr<HashQuery>> queries) {
  if (queries.empty()) return;
  const std::vector<uint64_t> hashes = scheduler_->block_manager().CachedBlockHashes();
  absl::MutexLock lock(&mu_);
  for (const std::shared_ptr<HashQuery>& query : queries) {
    query->hashes = hashes;
    query->done = true;
  }
}

void Engine::PublishSnapshot(const StepRecord* step) {
  PublishKvEvents();
  const BlockManager& blocks = scheduler_->block_manager();
  totals_.num_running = scheduler_->num_running();
  totals_.num_waiting = scheduler_->num_waiting();
  totals_.num_swapped = scheduler_->num_swapped();
  totals_.free_gpu_blocks = blocks.num_free_gpu_blocks();
  totals_.free_cpu_blocks = blocks.num_free_cpu_blocks();
  totals_.prefix_cache_queries_total = blocks.prefix_cache_queries();
  totals_.prefix_cache_hits_total = blocks.prefix_cache_hits();
  if (speculator_ != nullptr) totals_.spec_decode = speculator_->totals();
  if (lora_ != nullptr) totals_.lora = lora_->Activity(*scheduler_);
  if (step != nullptr) {
    const absl::Time now = absl::Now();
    if (now - kv_usage_time_ >= kKvUsageRefresh || totals_.num_running == 0) {
      const KvSlotUsage usage = kv_usage_meter_.Measure(*scheduler_);
      totals_.kv_filled_slots = usage.filled_slots;
      totals_.kv_allocated_slots = usage.allocated_slots;
      kv_usage_time_ = now;
    }
    totals_.last_batch_size = step->batch_size;
    totals_.num_steps += 1;
    if (pipeline_ != nullptr) totals_.num_overlapped_steps = pipeline_->num_overlapped();
    totals_.num_preemptions_total += step->num_preempted;
    totals_.generation_tokens_total += step->num_generated_tokens;
    totals_.batched_sequences_total += step->batch_size;
    totals_.seconds_total += step->seconds;
  }
  {
    absl::MutexLock lock(&mu_);
    const bool accepting = snapshot_.accepting && accepting_;
    snapshot_ = totals_;
    snapshot_.accepting = accepting;
    snapshot_.healthy = healthy_;
    num_finishing_ = 0;
  }
  if (step != nullptr && observer_ != nullptr) observer_->OnStep(*step, snapshot());
}

}  // namespace pagoda::scheduler
