#include "scheduler/api/validation_pool.h"

#include <utility>

namespace pagoda::scheduler {

ValidationPool::ValidationPool(int num_threads, int max_pending) : max_pending_(max_pending) {
  for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { Work(); });
}

ValidationPool::~ValidationPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

bool ValidationPool::TrySubmit(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || static_cast<int>(tasks_.size()) >= max_pending_) return false;
  tasks_.push_back(std::move(task));
  return true;
}

void ValidationPool::Work() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]()
                       ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_ || !tasks_.empty(); };
      mu_.Await(absl::Condition(&ready));
      // Accepted tasks finish their calls, so they run even when stopping.
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace pagoda::scheduler
