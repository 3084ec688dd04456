#include "scheduler/api/request_reactors.h"

#include <deque>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

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
  out.sink = std::move(sink);
  return out;
}

namespace {

// ---------------------------------------------------------------- unary

class UnaryCall : public grpc::ServerUnaryReactor {
 public:
  UnaryCall(CallTracker* calls, Engine* engine, std::string request_id)
      : calls_(calls), engine_(engine), request_id_(std::move(request_id)) {
    calls_->Begin();
  }
  // Once the engine took the request, before the reactor goes to gRPC.
  // Holding the sink keeps its address (the abort's identity) from being
  // reused by a later request while this call can still abort.
  void set_accepted(std::shared_ptr<RequestSink> sink) { sink_ = std::move(sink); }
  void OnCancel() override {
    // A refused call has nothing in the engine; an id alone could name
    // another call's request.
    if (sink_ != nullptr) engine_->AbortRequest(request_id_, sink_.get());
  }
  void OnDone() override {
    CallTracker* calls = calls_;
    delete this;
    calls->End();
  }

 private:
  CallTracker* calls_;
  Engine* engine_;
  std::string request_id_;
  std::shared_ptr<RequestSink> sink_;  // Null unless the engine accepted the request.
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
    if (output_.TakeStopAbort()) engine_->AbortRequest(output_.whole().request_id(), this);
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
  StreamState(StreamCall* call, Engine* engine, RequestOutput output)
      : call_(call), engine_(engine), output_(std::move(output)) {}

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
  Engine* const engine_;
  RequestOutput output_ ABSL_GUARDED_BY(mu_);
  std::deque<GenerateResponse> pending_ ABSL_GUARDED_BY(mu_);
  GenerateResponse in_flight_ ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> final_status_ ABSL_GUARDED_BY(mu_);
  bool finish_started_ ABSL_GUARDED_BY(mu_) = false;
};

class StreamCall : public grpc::ServerWriteReactor<GenerateResponse> {
 public:
  StreamCall(CallTracker* calls, Engine* engine, std::string request_id)
      : calls_(calls), engine_(engine), request_id_(std::move(request_id)) {
    calls_->Begin();
  }
  void set_state(std::shared_ptr<StreamState> state) { state_ = std::move(state); }
  // Once the engine took the request, before the reactor goes to gRPC.
  void set_accepted() { accepted_ = true; }

  void OnWriteDone(bool ok) override {
    if (!ok) Abort();  // The client is gone.
    state_->WriteDone(ok);
  }
  void OnCancel() override { Abort(); }
  void OnDone() override {
    CallTracker* calls = calls_;
    delete this;
    calls->End();
  }

 private:
  // Aborts only this call's own request (see UnaryCall::OnCancel).
  void Abort();

  CallTracker* calls_;
  Engine* engine_;
  std::string request_id_;
  std::shared_ptr<StreamState> state_;
  bool accepted_ = false;
};

void StreamCall::Abort() {
  if (accepted_) engine_->AbortRequest(request_id_, state_.get());
}

void StreamState::OnDelta(const RequestDelta& delta) {
  Action action;
  bool stop_abort = false;
  std::string request_id;
  {
    absl::MutexLock lock(&mu_);
    pending_.push_back(output_.AddDelta(delta));
    stop_abort = output_.TakeStopAbort();
    request_id = output_.whole().request_id();
    action = NextAction();
  }
  // Stop strings ended every sequence: free the blocks now.
  if (stop_abort) engine_->AbortRequest(request_id, this);
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
  if (finish_started_ || write_in_flight_) return Action::kNone;
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

}  // namespace

grpc::ServerUnaryReactor* StartUnaryGenerate(CallTracker* calls, Engine* engine,
                                             const Tokenizer* tokenizer, ValidatedRequest request,
                                             GenerateResponse* response) {
  auto* call = new UnaryCall(calls, engine, request.request_id);
  auto sink =
      std::make_shared<UnarySink>(call, engine, response, MakeRequestOutput(request, tokenizer));
  absl::Status accepted = engine->AddRequest(MakeEngineRequest(request, sink));
  // gRPC holds back the engine's Finish (and so OnCancel and OnDone) until
  // the reactor is returned, so setting this after AddRequest is safe.
  if (accepted.ok()) {
    call->set_accepted(std::move(sink));
  } else {
    call->Finish(ToGrpcStatus(accepted));
  }
  return call;
}

grpc::ServerWriteReactor<GenerateResponse>* StartStreamGenerate(CallTracker* calls, Engine* engine,
                                                                const Tokenizer* tokenizer,
                                                                ValidatedRequest request) {
  auto* call = new StreamCall(calls, engine, request.request_id);
  auto state = std::make_shared<StreamState>(call, engine, MakeRequestOutput(request, tokenizer));
  call->set_state(state);
  absl::Status accepted = engine->AddRequest(MakeEngineRequest(request, state));
  if (accepted.ok()) {
    call->set_accepted();
  } else {
    state->OnFinish(accepted);
  }
  return call;
}

grpc::ServerWriteReactor<GenerateResponse>* FailedStream(const grpc::Status& status) {
  return new FailedStreamCall(status);
}

}  // namespace pagoda::scheduler
