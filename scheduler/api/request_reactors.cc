#include "scheduler/api/request_reactors.h"

#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "scheduler/api/engine_stream_call.h"
#include "scheduler/api/stream_write_queue.h"
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
    output_.AccumulateDelta(delta);
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

// The part of a stream that the engine holds; outlives the reactor when the
// client leaves early. All gRPC calls are decided under mu_ (so exactly one
// party starts each write and the Finish) and made outside it.
class StreamState : public RequestSink {
 public:
  StreamState(grpc::ServerWriteReactor<GenerateResponse>* call, RequestOutput output,
              Engine* engine, std::string request_id, int max_queued_messages)
      : call_(call),
        output_(std::move(output)),
        engine_(engine),
        request_id_(std::move(request_id)),
        writes_(max_queued_messages) {}

  void OnDelta(const RequestDelta& delta) override;
  void OnFinish(const absl::Status& status) override;
  // From the reactor.
  void WriteDone(bool ok);

 private:
  using Writes = StreamWriteQueue<GenerateResponse>;

  absl::Mutex mu_;
  grpc::ServerWriteReactor<GenerateResponse>* const
      call_;  // Valid until the queue starts the Finish.
  RequestOutput output_ ABSL_GUARDED_BY(mu_);
  Engine* const engine_;
  const std::string request_id_;
  Writes writes_ ABSL_GUARDED_BY(mu_);  // Perform runs outside mu_.
};

using StreamCall = EngineStreamCall<GenerateResponse, StreamState>;

void StreamState::OnDelta(const RequestDelta& delta) {
  Writes::Step step;
  bool overflow = false;
  bool stop_abort = false;
  {
    absl::MutexLock lock(&mu_);
    if (writes_.ending()) return;  // The rest is dropped.
    overflow = !writes_.Push(output_.AddDelta(delta));
    stop_abort = output_.TakeStopAbort();
    step = writes_.Next();
  }
  // Stop strings ended every sequence, or the client stopped reading: free
  // the blocks at the engine's next step. Its OnFinish then ends the stream
  // (an overflow's status is already set; a stop reads as success).
  if (overflow || stop_abort) {
    engine_->AbortRequest(request_id_, this,
                          overflow ? Engine::AbortCause::kCancelled
                                   : Engine::AbortCause::kStopString);
  }
  writes_.Perform(step, call_, &mu_);
}

void StreamState::OnFinish(const absl::Status& status) {
  Writes::Step step;
  {
    absl::MutexLock lock(&mu_);
    if (!writes_.has_final_status()) {
      writes_.SetFinalStatus(ToGrpcStatus(output_.FinalStatus(status)));
    }
    step = writes_.Next();
  }
  writes_.Perform(step, call_, &mu_);
}

void StreamState::WriteDone(bool ok) {
  Writes::Step step;
  {
    absl::MutexLock lock(&mu_);
    // After a failed write the call ends now. The engine may still deliver
    // the abort's OnFinish; it will find the call finished.
    writes_.WriteDone(ok);
    step = writes_.Next();
  }
  writes_.Perform(step, call_, &mu_);
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
