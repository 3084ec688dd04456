#ifndef PAGODA_SCHEDULER_API_HTTP_REQUEST_STREAM_H_
#define PAGODA_SCHEDULER_API_HTTP_REQUEST_STREAM_H_

#include <deque>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pagoda/v1/generation.pb.h"
#include "scheduler/api/request_output.h"
#include "scheduler/engine/engine.h"
#include "scheduler/engine/request_sink.h"
#include "scheduler/engine/output_processor.h"

namespace pagoda::scheduler {

// Hands one request's progress from the engine thread to the HTTP thread
// that serves it: the engine pushes deltas (never blocking), the HTTP thread
// waits for them. Stop strings end the request in the engine as in gRPC
// (RequestOutput::TakeStopAbort). Thread-safe.
class HttpRequestStream : public RequestSink {
 public:
  // `engine` must outlive this object.
  HttpRequestStream(Engine* engine, RequestOutput output)
      : engine_(engine), output_(std::move(output)) {}

  void OnDelta(const RequestDelta& delta) override;
  void OnFinish(const absl::Status& status) override;

  // One stream message, or the end of the request (message empty, status set).
  struct Event {
    std::optional<pagoda::v1::GenerateResponse> message;
    absl::Status status;  // Meaningful when !message.
  };
  // Waits up to `timeout` for the next event; nullopt on timeout.
  std::optional<Event> Next(absl::Duration timeout);
  // Waits up to `timeout` for the end; then the whole response or the
  // failure, nullopt while the request still runs.
  std::optional<absl::StatusOr<pagoda::v1::GenerateResponse>> Whole(absl::Duration timeout);

 private:
  Engine* const engine_;
  absl::Mutex mu_;
  RequestOutput output_ ABSL_GUARDED_BY(mu_);
  std::deque<pagoda::v1::GenerateResponse> pending_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> final_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_HTTP_REQUEST_STREAM_H_
