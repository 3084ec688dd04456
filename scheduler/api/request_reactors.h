#ifndef PAGODA_SCHEDULER_API_REQUEST_REACTORS_H_
#define PAGODA_SCHEDULER_API_REQUEST_REACTORS_H_

// The pagoda.v1 Generation calls as gRPC callback reactors: unary and
// streaming Generate, the call tracker that drain waits on, and the
// absl::Status to grpc::Status mapping at this edge.

#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "pagoda/v1/generation.pb.h"
#include "scheduler/api/request_output.h"
#include "scheduler/api/request_validation.h"
#include "scheduler/api/validation_pool.h"
#include "scheduler/engine/engine.h"

namespace pagoda::scheduler {

grpc::Status ToGrpcStatus(const absl::Status& status);

// Counts Generate calls that gRPC has not finished with yet (a stream whose
// engine work is done may still be writing). Drain waits for zero so that
// in-flight responses reach their clients before the server closes.
// Thread-safe.
class CallTracker {
 public:
  void Begin();
  void End();
  // True if no call is active within `timeout`.
  bool WaitUntilIdle(absl::Duration timeout);

 private:
  absl::Mutex mu_;
  int active_ ABSL_GUARDED_BY(mu_) = 0;
};

// The RequestOutput (stop strings, n) and the EngineRequest of a validated
// request: the one submission path that gRPC and HTTP share. MakeEngineRequest
// moves the prompt out of `request`.
RequestOutput MakeRequestOutput(const ValidatedRequest& request, const Tokenizer* tokenizer);
EngineRequest MakeEngineRequest(ValidatedRequest& request, std::shared_ptr<RequestSink> sink);

// Validates a request (tokenizing a text prompt); may run on another thread.
using ValidateFunction = std::function<absl::StatusOr<ValidatedRequest>()>;

// Starts one Generate call: runs `validate` (on `pool` if not null, else
// right here), submits the request to `engine` and answers the whole result
// when the engine finishes it, or the validation's or engine's error; a full
// pool is RESOURCE_EXHAUSTED. A client cancel aborts the request in the
// engine. Owns itself: deletes itself when gRPC is done with it. `calls`,
// `engine`, `tokenizer`, `pool` and whatever `validate` uses must outlive the
// call, which is counted in `calls` until then.
grpc::ServerUnaryReactor* StartUnaryGenerate(CallTracker* calls, Engine* engine,
                                             const Tokenizer* tokenizer, ValidationPool* pool,
                                             ValidateFunction validate,
                                             pagoda::v1::GenerateResponse* response);

// Starts one GenerateStream call, validated like StartUnaryGenerate: one
// message per engine delta, one write in flight at a time, later deltas
// queued in the reactor; the stream ends with the engine's final status.
// Client cancel or a failed write aborts the request in the engine (its
// blocks are freed at the next step). A client that stops reading while more
// than `max_queued_messages` messages wait gets the stream ended with
// RESOURCE_EXHAUSTED and its request aborted, so memory per stream stays
// bounded. Owns itself; counted in `calls` like a unary call.
grpc::ServerWriteReactor<pagoda::v1::GenerateResponse>* StartStreamGenerate(
    CallTracker* calls, Engine* engine, const Tokenizer* tokenizer, ValidationPool* pool,
    ValidateFunction validate, int max_queued_messages);

// A call that fails at once (validation error, refused by the engine).
grpc::ServerWriteReactor<pagoda::v1::GenerateResponse>* FailedStream(const grpc::Status& status);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_REQUEST_REACTORS_H_
