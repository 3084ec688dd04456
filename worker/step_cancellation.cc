#include "worker/step_cancellation.h"

#include <utility>

namespace pagoda::worker {

StepCancellationWatcher::StepCancellationWatcher(absl::Duration period)
    : period_(period), thread_([this] { Loop(); }) {}

StepCancellationWatcher::~StepCancellationWatcher() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  thread_.join();
}

void StepCancellationWatcher::Begin(grpc::ServerContext* context, std::function<void()> on_cancel) {
  absl::MutexLock lock(&mutex_);
  context_ = context;
  on_cancel_ = std::move(on_cancel);
}

void StepCancellationWatcher::End() {
  // The watcher runs on_cancel with the mutex held, so this waits for it.
  absl::MutexLock lock(&mutex_);
  context_ = nullptr;
  on_cancel_ = nullptr;
}

void StepCancellationWatcher::Loop() {
  absl::MutexLock lock(&mutex_);
  while (!stopping_) {
    if (context_ == nullptr) {
      mutex_.Await(absl::Condition(
          +[](StepCancellationWatcher* w)
               ABSL_NO_THREAD_SAFETY_ANALYSIS { return w->stopping_ || w->context_ != nullptr; },
          this));
      continue;
    }
    if (context_->IsCancelled()) {
      std::function<void()> on_cancel = std::move(on_cancel_);
      context_ = nullptr;
      on_cancel_ = nullptr;
      if (on_cancel) on_cancel();
      continue;
    }
    mutex_.AwaitWithTimeout(absl::Condition(&stopping_), period_);
  }
}

}  // namespace pagoda::worker
