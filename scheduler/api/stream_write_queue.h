#ifndef PAGODA_SCHEDULER_API_STREAM_WRITE_QUEUE_H_
#define PAGODA_SCHEDULER_API_STREAM_WRITE_QUEUE_H_

// StreamWriteQueue: the bounded queue between the engine's thread and a gRPC
// stream that allows one write in flight.

#include <deque>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"

namespace pagoda::scheduler {

// The write side of a server stream whose messages come from the engine's
// thread while gRPC allows one write in flight: messages wait in a queue of
// at most `max_queued` (a client that stops reading ends its stream with
// RESOURCE_EXHAUSTED at once, whatever is in flight), then the final status
// ends the stream. Both gRPC streaming services (pagoda.v1 and vLLM's engine
// API) write through it.
//
// Not synchronized: its owner calls every method but Perform under the
// owner's mutex, and Perform, with the step Next returned, outside it, so
// that exactly one party starts each write and the Finish.
template <typename Message>
class StreamWriteQueue {
 public:
  enum class Step { kNone, kWrite, kFinish };

  explicit StreamWriteQueue(int max_queued) : max_queued_(max_queued) {}

  // The stream is ending: what is pushed now is dropped.
  bool ending() const { return overflowed_ || finish_started_; }

  // Queues `message`. Returns false when it overflows the queue: the queue
  // is dropped and the stream ends RESOURCE_EXHAUSTED; the owner aborts its
  // request.
  bool Push(Message message) {
    if (ending()) return true;
    pending_.push_back(std::move(message));
    if (static_cast<int>(pending_.size()) <= max_queued_) return true;
    overflowed_ = true;
    pending_.clear();
    final_status_ = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                 absl::StrCat("the client is not reading the stream: more than ",
                                              max_queued_, " messages were waiting"));
    return false;
  }

  // The status the stream ends with once the queue drains; the first wins.
  bool has_final_status() const { return final_status_.has_value(); }
  void SetFinalStatus(grpc::Status status) {
    if (!final_status_.has_value()) final_status_ = std::move(status);
  }

  // The write in flight completed. A failed one means nothing more can reach
  // the client: the stream ends now.
  void WriteDone(bool ok) {
    write_in_flight_ = false;
    if (ok) return;
    pending_.clear();
    SetFinalStatus(grpc::Status(grpc::StatusCode::CANCELLED, "stream write failed"));
  }

  // What the owner does next, outside its mutex.
  Step Next() {
    if (finish_started_) return Step::kNone;
    // A stalled client may never complete the write in flight: finish beside it.
    if (overflowed_) {
      finish_started_ = true;
      return Step::kFinish;
    }
    if (write_in_flight_) return Step::kNone;
    if (!pending_.empty()) {
      in_flight_ = std::move(pending_.front());
      pending_.pop_front();
      write_in_flight_ = true;
      return Step::kWrite;
    }
    if (final_status_.has_value()) {
      finish_started_ = true;
      return Step::kFinish;
    }
    return Step::kNone;
  }

  // Starts `step` on `call`, outside `mu` (the owner's mutex). The message in
  // flight is not touched again until its write completes, nor the final
  // status after Finish, so the write reads them unlocked.
  void Perform(Step step, grpc::ServerWriteReactor<Message>* call, absl::Mutex* mu) {
    switch (step) {
      case Step::kNone:
        return;
      case Step::kWrite:
        call->StartWrite(&in_flight_);
        return;
      case Step::kFinish: {
        grpc::Status status;
        {
          absl::MutexLock lock(mu);
          status = *final_status_;
        }
        call->Finish(status);
        return;
      }
    }
  }

 private:
  const int max_queued_;
  // The client stopped reading: the stream ends now, whatever is in flight.
  bool overflowed_ = false;
  std::deque<Message> pending_;
  Message in_flight_;
  bool write_in_flight_ = false;
  std::optional<grpc::Status> final_status_;
  bool finish_started_ = false;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_STREAM_WRITE_QUEUE_H_
