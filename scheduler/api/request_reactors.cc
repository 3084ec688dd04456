#include "scheduler/api/request_reactors.h"

#include <deque>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "scheduler/engine/output_processor.h"

namespace pagoda::scheduler {

using pagoda::v1::GenerateResponse;

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbers.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

void CallTracker::Begin() {
  absl::MutexLock lock(&mu_);
  ++active_;
}

void CallTracker::End() {
  absl::MutexLock lock(&mu_);
  --active_;
}

bool CallTracker::WaitUntilIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return active_ == 0; };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

RequestOutput MakeRequestOutput(const ValidatedRequest& request, const Tokenizer* tokenizer) {
  OutputOptions options;
  options.stop_strings = request.stop_strings;
  options.include_stop_str_in_output = request.include_stop_str_in_output;
  options.num_sequences = request.sampling.n;
  return RequestOutput(request.request_id, static_cast<int>(request.prompt_token_ids.size()),
                       tokenizer, std::move(options));
}

EngineRequest MakeEngineRequest(ValidatedRequest& request, std::shared_ptr<RequestSink> sink) {
  EngineRequest out;
  out.request_id = request.request_id;
  out.prompt_token_ids = std::move(request.prompt_token_ids);
  out.sampling = request.sampling;
  out.stopping = std::move(request.stopping);
  out.arrival_time = absl::Now();
  out.priority = request.priority;
  out.sink = std::move(sink);
  return out;
}

namespace {

// ---------------------------------------------------------------- unary

class UnaryCall : public grpc::ServerUnaryReactor {
 public:
  UnaryCall(CallTracker* calls, Engine* engine) : calls_(calls), engine_(engine) {
    calls_->Begin();
  }
  // Called just before the request goes to the engine, from whichever thread
  // validated it: from then on a cancel aborts it. Holding the sink keeps its
  // address (the abort's identity) from being reused by a later request while
  // this call can still abort; an abort with a sink the engine never took
  // (the request was refused) is ignored by the engine.
  void Arm(std::string request_id, std::shared_ptr<RequestSink> sink) {
    absl::MutexLock lock(&mu_);
    request_id_ = std::move(request_id);
    sink_ = std::move(sink);
  }
  void OnCancel() override {
    std::string request_id;
    std::shared_ptr<RequestSink> sink;
    {
      absl::MutexLock lock(&mu_);
      request_id = request_id_;
      sink = sink_;
    }
    // Not yet armed: nothing is in the engine, and an id alone could name
    // another call's request.
    if (sink != nullptr) engine_->AbortRequest(request_id, sink.get());
  }
  void OnDone() override {
    CallTracker* calls = calls_;
    delete this;
    calls->End();
  }

 private:
  CallTracker* const calls_;
  Engine* const engine_;
  absl::Mutex mu_;
  std::string request_id_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<RequestSink> sink_ ABSL_GUARDED_BY(mu_);
};

// Collects the deltas; answers once. The engine calls it only until
// OnFinish, and the call (and `response`) live until Finish.
class UnarySink : public RequestSink {
 public:
  UnarySink(UnaryCall* call, Engine* engine, GenerateResponse* response, RequestOutput output)
      : call_(call), engine_(engine), response_(response), output_(std::move(output)) {}

  void OnDelta(const RequestDelta& delta) override {
    output_.AddDelta(delta);
    // Stop strings ended every sequence: free the blocks now.
    if (output_.TakeStopAbort()) {
      engine_->AbortRequest(output_.whole().request_id(), this, Engine::AbortCause::kStopString);
    }
  }
  void OnFinish(const absl::Status& engine_status) override {
    const absl::Status status = output_.FinalStatus(engine_status);
    if (status.ok()) *response_ = output_.whole();
    call_->Finish(ToGrpcStatus(status));
  }

 private:
  UnaryCall* call_;
  Engine* engine_;
  GenerateResponse* response_;
  RequestOutput output_;
};

// ---------------------------------------------------------------- stream

class StreamCall;

// The part of a stream that the engine holds; outlives the reactor when the
// client leaves early. All gRPC calls are decided under mu_ (so exactly one
// party starts each write and the Finish) and made outside it.
class StreamState : public RequestSink {
 public:
  StreamState(StreamCall* call, RequestOutput output, Engine* engine, std::string request_id,
              int max_queued_messages)
      : call_(call),
        output_(std::move(output)),
        engine_(engine),
        request_id_(std::move(request_id)),
        max_queued_messages_(max_queued_messages) {}

  void OnDelta(const RequestDelta& delta) override;
  void OnFinish(const absl::Status& status) override;
  // From the reactor.
  void WriteDone(bool ok);

 private:
  // Returns the next action for the caller to take outside the lock.
  enum class Action { kNone, kWrite, kFinish };
  Action NextAction() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run(Action action);

  absl::Mutex mu_;
  StreamCall* const call_;  // Valid until finish_started_.
  RequestOutput output_ ABSL_GUARDED_BY(mu_);
  Engine* const engine_;
  const std::string request_id_;
  const int max_queued_messages_;
  // The client stopped reading: the stream ends now, whatever is in flight.
  bool overflowed_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<GenerateResponse> pending_ ABSL_GUARDED_BY(mu_);
  GenerateResponse in_flight_ ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> final_status_ ABSL_GUARDED_BY(mu_);
  bool finish_started_ ABSL_GUARDED_BY(mu_) = false;
};

class StreamCall : public grpc::ServerWriteReactor<GenerateResponse> {
 public:
  StreamCall(CallTracker* calls, Engine* engine) : calls_(calls), engine_(engine) {
    calls_->Begin();
  }
  // Called just before the request goes to the engine (see UnaryCall::Arm).
  void Arm(std::string request_id, std::shared_ptr<StreamState> state) {
    absl::MutexLock lock(&mu_);
    request_id_ = std::move(request_id);
    state_ = std::move(state);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) Abort();  // The client is gone.
    // Writes start only once armed.
    state()->WriteDone(ok);
  }
  void OnCancel() override { Abort(); }
  void OnDone() override {
    CallTracker* calls = calls_;
    delete this;
    calls->End();
  }

 private:
  std::shared_ptr<StreamState> state() {
    absl::MutexLock lock(&mu_);
    return state_;
  }
  // Aborts only this call's own request (see UnaryCall::OnCancel).
  void Abort();

  CallTracker* const calls_;
  Engine* const engine_;
  absl::Mutex mu_;
  std::string request_id_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<StreamState> state_ ABSL_GUARDED_BY(mu_);
};

void StreamCall::Abort() {
  std::string request_id;
  std::shared_ptr<StreamState> state;
  {
    absl::MutexLock lock(&mu_);
    request_id = request_id_;
    state = state_;
  }
  if (state != nullptr) engine_->AbortRequest(request_id, state.get());
}

void StreamState::OnDelta(const RequestDelta& delta) {
  Action action;
  bool overflow = false;
  bool stop_abort = false;
  {
    absl::MutexLock lock(&mu_);
    if (overflowed_ || finish_started_) return;  // Ending; the rest is dropped.
    pending_.push_back(output_.AddDelta(delta));
    if (static_cast<int>(pending_.size()) > max_queued_messages_) {
      overflow = overflowed_ = true;
      pending_.clear();
      final_status_ = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                   absl::StrCat("the client is not reading the stream: more than ",
                                                max_queued_messages_, " messages were waiting"));
    }
    stop_abort = output_.TakeStopAbort();
    action = NextAction();
  }
  // Stop strings ended every sequence, or the client stopped reading: free
  // the blocks at the engine's next step. Its OnFinish then ends the stream
  // (an overflow's status is already set; a stop reads as success).
  if (overflow || stop_abort) {
    engine_->AbortRequest(request_id_, this,
                          overflow ? Engine::AbortCause::kCancelled
                                   : Engine::AbortCause::kStopString);
  }
  Run(action);
}

void StreamState::OnFinish(const absl::Status& status) {
  Action action;
  {
    absl::MutexLock lock(&mu_);
    if (!final_status_.has_value()) final_status_ = ToGrpcStatus(output_.FinalStatus(status));
    action = NextAction();
  }
  Run(action);
}

void StreamState::WriteDone(bool ok) {
  Action action;
  {
    absl::MutexLock lock(&mu_);
    write_in_flight_ = false;
    if (!ok) {
      // Nothing more can reach the client: end the call now. The engine may
      // still deliver the abort's OnFinish; it will find the call finished.
      pending_.clear();
      if (!final_status_.has_value()) {
        final_status_ = grpc::Status(grpc::StatusCode::CANCELLED, "stream write failed");
      }
    }
    action = NextAction();
  }
  Run(action);
}

StreamState::Action StreamState::NextAction() {
  if (finish_started_) return Action::kNone;
  // A stalled client may never complete the write in flight: finish beside it.
  if (overflowed_) {
    finish_started_ = true;
    return Action::kFinish;
  }
  if (write_in_flight_) return Action::kNone;
  if (!pending_.empty()) {
    in_flight_ = std::move(pending_.front());
    pending_.pop_front();
    write_in_flight_ = true;
    return Action::kWrite;
  }
  if (final_status_.has_value()) {
    finish_started_ = true;
    return Action::kFinish;
  }
  return Action::kNone;
}

void StreamState::Run(Action action) {
  // in_flight_ and final_status_ are not touched again until the write
  // completes or at all after Finish, so reading them unlocked is safe.
  switch (action) {
    case Action::kNone:
      return;
    case Action::kWrite:
      call_->StartWrite(&in_flight_);
      return;
    case Action::kFinish: {
      grpc::Status status;
      {
        absl::MutexLock lock(&mu_);
        status = *final_status_;
      }
      call_->Finish(status);
      return;
    }
  }
}

class FailedStreamCall : public grpc::ServerWriteReactor<GenerateResponse> {
 public:
  explicit FailedStreamCall(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

// Hands a validated request to the engine, or ends the call with the error.
// After a successful AddRequest the engine may finish (and so delete) `call`
// at any moment: nothing touches it after that.
void SubmitUnary(UnaryCall* call, Engine* engine, const Tokenizer* tokenizer,
                 absl::StatusOr<ValidatedRequest> validated, GenerateResponse* response) {
  if (!validated.ok()) {
    call->Finish(ToGrpcStatus(validated.status()));
    return;
  }
  auto sink =
      std::make_shared<UnarySink>(call, engine, response, MakeRequestOutput(*validated, tokenizer));
  call->Arm(validated->request_id, sink);
  absl::Status accepted = engine->AddRequest(MakeEngineRequest(*validated, sink));
  if (!accepted.ok()) call->Finish(ToGrpcStatus(accepted));
}

void SubmitStream(StreamCall* call, Engine* engine, const Tokenizer* tokenizer,
                  absl::StatusOr<ValidatedRequest> validated, int max_queued_messages) {
  if (!validated.ok()) {
    call->Finish(ToGrpcStatus(validated.status()));
    return;
  }
  auto state = std::make_shared<StreamState>(call, MakeRequestOutput(*validated, tokenizer), engine,
                                             validated->request_id, max_queued_messages);
  call->Arm(validated->request_id, state);
  absl::Status accepted = engine->AddRequest(MakeEngineRequest(*validated, state));
  if (!accepted.ok()) state->OnFinish(accepted);
}

const grpc::Status kPoolFull(grpc::StatusCode::RESOURCE_EXHAUSTED,
                             "too many requests are waiting to be tokenized; retry later");

}  // namespace

grpc::ServerUnaryReactor* StartUnaryGenerate(CallTracker* calls, Engine* engine,
                                             const Tokenizer* tokenizer, ValidationPool* pool,
                                             ValidateFunction validate,
                                             GenerateResponse* response) {
  auto* call = new UnaryCall(calls, engine);
  if (pool == nullptr) {
    SubmitUnary(call, engine, tokenizer, validate(), response);
  } else if (!pool->TrySubmit([=, validate = std::move(validate)] {
               SubmitUnary(call, engine, tokenizer, validate(), response);
             })) {
    call->Finish(kPoolFull);
  }
  return call;
}

grpc::ServerWriteReactor<GenerateResponse>* StartStreamGenerate(CallTracker* calls, Engine* engine,
                                                                const Tokenizer* tokenizer,
                                                                ValidationPool* pool,
                                                                ValidateFunction validate,
                                                                int max_queued_messages) {
  auto* call = new StreamCall(calls, engine);
  if (pool == nullptr) {
    SubmitStream(call, engine, tokenizer, validate(), max_queued_messages);
  } else if (!pool->TrySubmit([=, validate = std::move(validate)] {
               SubmitStream(call, engine, tokenizer, validate(), max_queued_messages);
             })) {
    call->Finish(kPoolFull);
  }
  return call;
}

grpc::ServerWriteReactor<GenerateResponse>* FailedStream(const grpc::Status& status) {
  return new FailedStreamCall(status);
}

}  // namespace pagoda::scheduler
