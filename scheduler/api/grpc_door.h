// What both gRPC services (pagoda.v1's Generation, vLLM's VllmEngine) are
// on the request path: the API key checked on a call's metadata, the calls
// in flight (drain waits for them) and the validation work they handed to
// the path's pool (waited for before the service goes).
#ifndef PAGODA_SCHEDULER_API_GRPC_DOOR_H_
#define PAGODA_SCHEDULER_API_GRPC_DOOR_H_

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "scheduler/api/api_key.h"
#include "scheduler/api/call_tracker.h"
#include "scheduler/api/request_path.h"

namespace pagoda::scheduler {

// How the gRPC services treat their callers (the API key and the tokenizer
// pool are the request path's: RequestPathOptions).
struct GenerationOptions {
  // Messages a stream may have waiting for a slow client before it is ended
  // with RESOURCE_EXHAUSTED (see StartStreamGenerate).
  int max_stream_queued_messages = 1024;
};

// Thread-safe. A service holds one as its first member, so that it is the
// last to go: the work it waits for counts itself out here.
class GrpcDoor {
 public:
  GrpcDoor(RequestPath* path, GenerationOptions options) : path_(path), options_(options) {}
  ~GrpcDoor() { pending_validations_.WaitUntilIdle(absl::InfiniteDuration()); }
  GrpcDoor(const GrpcDoor&) = delete;
  GrpcDoor& operator=(const GrpcDoor&) = delete;

  // OK if the call may proceed (no API key configured, or the right one).
  grpc::Status Authorize(const grpc::ServerContextBase& context) const {
    return CheckApiKey(context, path_->api_key());
  }
  // Waits until gRPC is done with every call counted in calls() (responses
  // written), or `timeout`; true if none is left. For drain, after the
  // engine is idle.
  bool WaitForCallsToFinish(absl::Duration timeout) { return calls_.WaitUntilIdle(timeout); }

  RequestPath* path() const { return path_; }
  CallTracker* calls() { return &calls_; }
  CallTracker* pending_validations() { return &pending_validations_; }
  const GenerationOptions& options() const { return options_; }

 private:
  RequestPath* const path_;
  const GenerationOptions options_;
  CallTracker calls_;
  CallTracker pending_validations_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_GRPC_DOOR_H_
