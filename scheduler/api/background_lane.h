#ifndef PAGODA_SCHEDULER_API_BACKGROUND_LANE_H_
#define PAGODA_SCHEDULER_API_BACKGROUND_LANE_H_

// BackgroundLane: long work on the HTTP server's io threads, cut into slices
// that yield to new requests, so a burst of streams does not delay the next
// request's first token.

#include <chrono>
#include <deque>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/io_context.hpp"

namespace pagoda::scheduler {

// Work for an io loop that may wait: it runs on the loop's threads, but in
// slices that go back to the end of the loop's queue after `slice`, so that
// what was queued meanwhile (a new request's bytes, a stream's first token)
// waits one slice, not behind all of it. Asio's queue is first in, first
// out: under a load of streams it held one pending delivery per stream, and
// a new request's read, then its first token, each waited a whole round of
// them (HTTP's TTFT at 256 streams was twice gRPC's).
//
// At most `max_pumps` slices run at once (one per loop thread: the lane
// never holds every thread while the queue has other work).
// Thread-safe.
class BackgroundLane {
 public:
  BackgroundLane(boost::asio::io_context& io, int max_pumps, std::chrono::microseconds slice);
  BackgroundLane(const BackgroundLane&) = delete;
  BackgroundLane& operator=(const BackgroundLane&) = delete;

  // Runs `work` on one of the loop's threads, after what waits in the lane
  // before it. Work still queued when the loop stops is dropped unrun.
  void Post(std::function<void()> work);

 private:
  // Runs queued work for one slice, then yields to the loop's queue.
  void Pump();

  boost::asio::io_context& io_;
  const int max_pumps_;
  const std::chrono::microseconds slice_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  int pumps_ ABSL_GUARDED_BY(mu_) = 0;  // Pumps posted or running.
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_BACKGROUND_LANE_H_
