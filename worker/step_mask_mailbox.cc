#include "worker/step_mask_mailbox.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace pagoda::worker {

void StepMaskMailbox::Begin(int64_t step_id) {
  absl::MutexLock lock(&mutex_);
  in_step_ = true;
  step_id_ = step_id;
  cancelled_ = false;
  mismatch_ = absl::OkStatus();
  if (held_.has_value() && held_->step_id() < step_id) held_.reset();  // A refused plan's.
  if (held_.has_value() && held_->step_id() != step_id) {
    mismatch_ = absl::InvalidArgumentError(absl::StrCat(
        "token masks for step ", held_->step_id(), " arrived for step ", step_id));
    held_.reset();
  }
}

void StepMaskMailbox::End() {
  absl::MutexLock lock(&mutex_);
  in_step_ = false;
}

void StepMaskMailbox::Deliver(v1::StepMasks masks) {
  absl::MutexLock lock(&mutex_);
  if (in_step_ && masks.step_id() != step_id_) {
    mismatch_ = absl::InvalidArgumentError(absl::StrCat(
        "token masks for step ", masks.step_id(), " arrived for step ", step_id_));
    return;
  }
  held_ = std::move(masks);
}

bool StepMaskMailbox::Arrived() const {
  return cancelled_ || !mismatch_.ok() || (held_.has_value() && held_->step_id() == step_id_);
}

absl::StatusOr<v1::StepMasks> StepMaskMailbox::Await(absl::Time deadline) {
  absl::MutexLock lock(&mutex_);
  mutex_.AwaitWithDeadline(absl::Condition(this, &StepMaskMailbox::Arrived), deadline);
  if (cancelled_) return absl::CancelledError("the server cancelled the step");
  if (!mismatch_.ok()) return mismatch_;
  if (!held_.has_value() || held_->step_id() != step_id_) {
    return absl::DeadlineExceededError(
        absl::StrCat("the token masks of step ", step_id_, " did not arrive"));
  }
  v1::StepMasks masks = std::move(*held_);
  held_.reset();
  return masks;
}

void StepMaskMailbox::Cancel() {
  absl::MutexLock lock(&mutex_);
  cancelled_ = true;
}

}  // namespace pagoda::worker
