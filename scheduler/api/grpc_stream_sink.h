// The one engine sink of a gRPC server stream, for both streaming services
// (pagoda.v1's GenerateStream, vLLM's Generate): the request's output
// (RequestOutput: text, stop strings), the door's messages (its Converter),
// the bounded write queue, and the ends asked of the engine through the
// request path (stop strings: "stop"; a client that stops reading: "abort").
#ifndef PAGODA_SCHEDULER_API_GRPC_STREAM_SINK_H_
#define PAGODA_SCHEDULER_API_GRPC_STREAM_SINK_H_

#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "pagoda/v1/generation.pb.h"
#include "scheduler/api/request_output.h"
#include "scheduler/api/request_path.h"
#include "scheduler/api/stream_write_queue.h"
#include "scheduler/engine/engine.h"

namespace pagoda::scheduler {

// The part of a stream that the engine holds; outlives the reactor
// (EngineStreamCall) when the client leaves early. Every gRPC action is
// decided under mu_ (so exactly one party starts each write and the Finish)
// and made outside it.
//
// `Converter` turns pagoda.v1 stream messages into the door's:
//   void Convert(pagoda::v1::GenerateResponse message, Push push);
//     calls push(Response) for each message to write (none, one or more);
//   grpc::Status End(const absl::Status& final_status, Push push);
//     the stream's last messages, if any, and the status it ends with
//     (final_status: the engine's, a stop-string abort read as success).
template <typename Response, typename Converter>
class GrpcStreamSink : public RequestSink {
 public:
  GrpcStreamSink(grpc::ServerWriteReactor<Response>* call, RequestOutput output,
                 Converter converter, RequestPath* path, std::string request_id,
                 int max_queued_messages)
      : call_(call),
        output_(std::move(output)),
        converter_(std::move(converter)),
        path_(path),
        request_id_(std::move(request_id)),
        writes_(max_queued_messages) {}

  void OnDelta(const RequestDelta& delta) override {
    typename Writes::Step step;
    bool overflow = false;
    bool stop_abort = false;
    {
      absl::MutexLock lock(&mu_);
      if (writes_.ending()) return;  // The rest is dropped.
      converter_.Convert(output_.AddDelta(delta),
                         [&](Response message) { overflow |= !writes_.Push(std::move(message)); });
      stop_abort = output_.TakeStopAbort();
      step = writes_.Next();
    }
    // Stop strings ended every sequence, or the client stopped reading: free
    // the blocks at the engine's next step. Its OnFinish then ends the
    // stream (an overflow's status is already set; a stop reads as success).
    if (overflow || stop_abort) {
      path_->EndEarly(request_id_, this, overflow ? EarlyEnd::kClientGone : EarlyEnd::kStopStrings);
    }
    writes_.Perform(step, call_, &mu_);
  }

  void OnFinish(const absl::Status& status) override {
    typename Writes::Step step;
    {
      absl::MutexLock lock(&mu_);
      if (!writes_.has_final_status()) {
        writes_.SetFinalStatus(converter_.End(output_.FinalStatus(status), [&](Response message) {
          writes_.Push(std::move(message));
        }));
      }
      step = writes_.Next();
    }
    writes_.Perform(step, call_, &mu_);
  }

  // From the reactor: the write in flight is done.
  void WriteDone(bool ok) {
    typename Writes::Step step;
    {
      absl::MutexLock lock(&mu_);
      // After a failed write the call ends now. The engine may still deliver
      // the abort's OnFinish; it will find the call finished.
      writes_.WriteDone(ok);
      step = writes_.Next();
    }
    writes_.Perform(step, call_, &mu_);
  }

 private:
  using Writes = StreamWriteQueue<Response>;

  absl::Mutex mu_;
  // Valid until the queue starts the Finish.
  grpc::ServerWriteReactor<Response>* const call_;
  RequestOutput output_ ABSL_GUARDED_BY(mu_);
  Converter converter_ ABSL_GUARDED_BY(mu_);
  RequestPath* const path_;
  const std::string request_id_;
  Writes writes_ ABSL_GUARDED_BY(mu_);  // Perform runs outside mu_.
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_GRPC_STREAM_SINK_H_
