// The gRPC reactor both streaming services share (pagoda.v1's
// GenerateStream, vLLM's Generate): call counting and the abort of its own
// request when the client leaves.
#ifndef PAGODA_SCHEDULER_API_ENGINE_STREAM_CALL_H_
#define PAGODA_SCHEDULER_API_ENGINE_STREAM_CALL_H_

// EngineStreamCall: the gRPC write reactor that both streaming services
// (pagoda.v1 and vLLM's engine API) run an engine request through, aborting the
// request when the client cancels.

#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "scheduler/api/call_tracker.h"
#include "scheduler/api/request_path.h"

namespace pagoda::scheduler {

// The reactor of a server-streaming call whose request runs in the engine,
// for both gRPC streaming services (pagoda.v1 and vLLM's engine API). It
// counts itself in `calls` until gRPC is done with it, and aborts its own
// request when the client cancels or a write fails. `State` is the engine's
// RequestSink for the call, with WriteDone(bool); it outlives the reactor
// when the client leaves early.
template <typename Response, typename State>
class EngineStreamCall : public grpc::ServerWriteReactor<Response> {
 public:
  EngineStreamCall(CallTracker* calls, RequestPath* path) : calls_(calls), path_(path) {
    calls_->Begin();
  }

  // Called just before the request goes to the engine: from then on a
  // cancel aborts it (see UnaryCall::Arm in request_reactors.cc).
  void Arm(std::string request_id, std::shared_ptr<State> state) {
    absl::MutexLock lock(&mu_);
    request_id_ = std::move(request_id);
    state_ = std::move(state);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) Abort();  // The client is gone.
    // Writes start only once armed.
    CurrentState()->WriteDone(ok);
  }
  void OnCancel() override { Abort(); }
  void OnDone() override {
    CallTracker* calls = calls_;
    delete this;
    calls->End();
  }

 private:
  std::shared_ptr<State> CurrentState() {
    absl::MutexLock lock(&mu_);
    return state_;
  }

  // Aborts only this call's own request (see UnaryCall::OnCancel).
  void Abort() {
    std::string request_id;
    std::shared_ptr<State> state;
    {
      absl::MutexLock lock(&mu_);
      request_id = request_id_;
      state = state_;
    }
    if (state != nullptr) path_->EndEarly(request_id, state.get(), EarlyEnd::kClientGone);
  }

  CallTracker* const calls_;
  RequestPath* const path_;
  absl::Mutex mu_;
  std::string request_id_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<State> state_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_ENGINE_STREAM_CALL_H_
