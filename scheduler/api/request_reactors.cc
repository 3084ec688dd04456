#include "scheduler/api/request_reactors.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "scheduler/api/engine_stream_call.h"
#include "scheduler/api/grpc_stream_sink.h"

namespace pagoda::scheduler {

using pagoda::v1::GenerateRequest;
using pagoda::v1::GenerateResponse;

namespace {

// ---------------------------------------------------------------- unary

class UnaryCall : public grpc::ServerUnaryReactor {
 public:
  UnaryCall(CallTracker* calls, RequestPath* path) : calls_(calls), path_(path) { calls_->Begin(); }
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
    if (sink != nullptr) path_->EndEarly(request_id, sink.get(), EarlyEnd::kClientGone);
  }
  void OnDone() override {
    CallTracker* calls = calls_;
    delete this;
    calls->End();
  }

 private:
  CallTracker* const calls_;
  RequestPath* const path_;
  absl::Mutex mu_;
  std::string request_id_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<RequestSink> sink_ ABSL_GUARDED_BY(mu_);
};

// Collects the deltas; answers once. The engine calls it only until
// OnFinish, and the call (and `response`) live until Finish.
class UnarySink : public RequestSink {
 public:
  UnarySink(UnaryCall* call, RequestPath* path, GenerateResponse* response, RequestOutput output)
      : call_(call), path_(path), response_(response), output_(std::move(output)) {}

  void OnDelta(const RequestDelta& delta) override {
    output_.AccumulateDelta(delta);
    path_->EndIfStopped(output_, output_.whole().request_id(), this);
  }
  void OnFinish(const absl::Status& engine_status) override {
    const absl::Status status = output_.FinalStatus(engine_status);
    if (status.ok()) *response_ = output_.whole();
    call_->Finish(ToGrpcStatus(status));
  }

 private:
  UnaryCall* call_;
  RequestPath* path_;
  GenerateResponse* response_;
  RequestOutput output_;
};

// ---------------------------------------------------------------- stream

// pagoda.v1's stream messages are the request's own.
struct PagodaMessages {
  template <typename Push>
  void Convert(GenerateResponse message, Push push) {
    push(std::move(message));
  }
  template <typename Push>
  grpc::Status End(const absl::Status& final_status, Push) {
    return ToGrpcStatus(final_status);
  }
};

using StreamState = GrpcStreamSink<GenerateResponse, PagodaMessages>;
using StreamCall = EngineStreamCall<GenerateResponse, StreamState>;

class FailedStreamCall : public grpc::ServerWriteReactor<GenerateResponse> {
 public:
  explicit FailedStreamCall(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

// Validates `request` and hands it to the engine, or ends the call with the
// error. After a successful Submit the engine may finish (and so delete)
// `call` at any moment: nothing touches it after that.
void SubmitUnary(UnaryCall* call, RequestPath* path, const GenerateRequest& request,
                 GenerateResponse* response) {
  absl::StatusOr<ValidatedRequest> validated = path->Validate(request);
  if (!validated.ok()) {
    call->Finish(ToGrpcStatus(validated.status()));
    return;
  }
  auto sink = std::make_shared<UnarySink>(call, path, response, path->MakeOutput(*validated));
  call->Arm(validated->request_id, sink);
  absl::Status accepted = path->Submit(*validated, sink);
  if (!accepted.ok()) call->Finish(ToGrpcStatus(accepted));
}

void SubmitStream(StreamCall* call, RequestPath* path, const GenerateRequest& request,
                  int max_queued_messages) {
  absl::StatusOr<ValidatedRequest> validated = path->Validate(request);
  if (!validated.ok()) {
    call->Finish(ToGrpcStatus(validated.status()));
    return;
  }
  auto state = std::make_shared<StreamState>(call, path->MakeOutput(*validated), PagodaMessages(),
                                             path, validated->request_id, max_queued_messages);
  call->Arm(validated->request_id, state);
  absl::Status accepted = path->Submit(*validated, state);
  if (!accepted.ok()) state->OnFinish(accepted);
}

// Token ids are checked in time linear in their (bounded) number; only
// text needs the tokenizer's time.
bool NeedsTokenizer(const GenerateRequest& request) { return !request.prompt().empty(); }

}  // namespace

grpc::ServerUnaryReactor* StartUnaryGenerate(CallTracker* calls, CallTracker* pending,
                                             RequestPath* path, const GenerateRequest* request,
                                             GenerateResponse* response) {
  auto* call = new UnaryCall(calls, path);
  absl::Status started = path->RunValidation(NeedsTokenizer(*request), pending,
                                             [=] { SubmitUnary(call, path, *request, response); });
  if (!started.ok()) call->Finish(ToGrpcStatus(started));
  return call;
}

grpc::ServerWriteReactor<GenerateResponse>* StartStreamGenerate(CallTracker* calls,
                                                                CallTracker* pending,
                                                                RequestPath* path,
                                                                const GenerateRequest* request,
                                                                int max_queued_messages) {
  auto* call = new StreamCall(calls, path);
  absl::Status started = path->RunValidation(NeedsTokenizer(*request), pending, [=] {
    SubmitStream(call, path, *request, max_queued_messages);
  });
  if (!started.ok()) call->Finish(ToGrpcStatus(started));
  return call;
}

grpc::ServerWriteReactor<GenerateResponse>* FailedStream(const grpc::Status& status) {
  return new FailedStreamCall(status);
}

}  // namespace pagoda::scheduler
