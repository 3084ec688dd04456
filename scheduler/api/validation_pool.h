#ifndef PAGODA_SCHEDULER_API_VALIDATION_POOL_H_
#define PAGODA_SCHEDULER_API_VALIDATION_POOL_H_

// ValidationPool: the bounded thread pool that tokenizes and validates
// requests off the front doors' threads.

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace pagoda::scheduler {

// A few threads that run request validation (tokenizing text prompts) off
// gRPC's threads, so a burst of long prompts cannot delay health checks or
// other calls. The queue is bounded: a full pool refuses work at once rather
// than letting tokenizing work pile up in memory.
// Thread-safe.
class ValidationPool {
 public:
  // `num_threads` >= 1; at most `max_pending` tasks wait beyond the running ones.
  ValidationPool(int num_threads, int max_pending);
  // Runs every task already accepted, then joins the threads.
  ~ValidationPool();
  ValidationPool(const ValidationPool&) = delete;
  ValidationPool& operator=(const ValidationPool&) = delete;

  // Queues `task`; false (and `task` is dropped unrun) when the queue is full.
  bool TrySubmit(std::function<void()> task);

 private:
  void Work();

  const int max_pending_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_VALIDATION_POOL_H_
