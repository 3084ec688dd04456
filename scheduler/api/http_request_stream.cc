#include "scheduler/api/http_request_stream.h"
#include "scheduler/engine/output_processor.h"

#include <utility>

namespace pagoda::scheduler {

void HttpRequestStream::OnDelta(const RequestDelta& delta) {
  bool stop_abort = false;
  std::string request_id;
  {
    absl::MutexLock lock(&mu_);
    pending_.push_back(output_.AddDelta(delta));
    stop_abort = output_.TakeStopAbort();
    request_id = output_.whole().request_id();
  }
  // Stop strings ended every sequence: free the blocks now.
  if (stop_abort) engine_->AbortRequest(request_id, this);
}

void HttpRequestStream::OnFinish(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (!final_status_.has_value()) final_status_ = output_.FinalStatus(status);
}

std::optional<HttpRequestStream::Event> HttpRequestStream::Next(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return !pending_.empty() || final_status_.has_value();
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) return std::nullopt;
  Event event;
  if (!pending_.empty()) {
    event.message = std::move(pending_.front());
    pending_.pop_front();
  } else {
    event.status = *final_status_;
  }
  return event;
}

std::optional<absl::StatusOr<pagoda::v1::GenerateResponse>> HttpRequestStream::Whole(
    absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return final_status_.has_value(); };
  if (!mu_.AwaitWithTimeout(absl::Condition(&done), timeout)) return std::nullopt;
  if (!final_status_->ok()) return *final_status_;
  return output_.whole();
}

}  // namespace pagoda::scheduler
