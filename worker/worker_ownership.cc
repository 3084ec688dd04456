#include "worker/worker_ownership.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "wire/worker_owner.h"

namespace pagoda::worker {

absl::Status WorkerOwnership::Claim(absl::string_view owner, absl::Time now) {
  if (absl::Status valid = wire::ValidateWorkerOwnerId(owner); !valid.ok()) return valid;
  absl::MutexLock lock(&mutex_);
  const bool free = owner_.empty() || owner_ == owner || now - last_seen_ > timeout_;
  if (!free) return Refusal(now);
  owner_ = std::string(owner);
  last_seen_ = now;
  return absl::OkStatus();
}

absl::Status WorkerOwnership::Check(absl::string_view owner, absl::Time now) {
  if (absl::Status valid = wire::ValidateWorkerOwnerId(owner); !valid.ok()) return valid;
  absl::MutexLock lock(&mutex_);
  if (owner_.empty()) return absl::OkStatus();
  if (owner_ != owner) return Refusal(now);
  last_seen_ = now;
  return absl::OkStatus();
}

void WorkerOwnership::Release(absl::string_view owner) {
  absl::MutexLock lock(&mutex_);
  if (owner_ == owner) owner_.clear();
}

absl::Status WorkerOwnership::Refusal(absl::Time now) const {
  return absl::FailedPreconditionError(absl::StrFormat(
      "this worker serves another server (owner %s..., last heard from %.1f s ago); it is "
      "released by that server's shutdown or after %.0f s without a call from it",
      owner_.substr(0, 8), absl::ToDoubleSeconds(now - last_seen_),
      absl::ToDoubleSeconds(timeout_)));
}

}  // namespace pagoda::worker
