// GrpcWorkerGroup's failure and restart policy: how the group turns
// unhealthy (Fail), shuts its workers down, and restarts them within
// --worker-restart-limit / --worker-restart-window with backoff (Recover),
// giving up for good past that. The group's connection and step code is in
// grpc_worker_group.cc.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "scheduler/workers/grpc_worker_group.h"

namespace pagoda::scheduler {

namespace v1 = ::pagoda::worker::v1;

void GrpcWorkerGroup::Fail(const std::string& reason) {
  absl::MutexLock lock(&mutex_);
  if (failure_.empty()) {
    failure_ = reason;
    if (!shutting_down_) LOG(ERROR) << "worker group unhealthy: " << reason;
  }
  healthy_.store(false);
  for (grpc::ClientContext* context : in_flight_) context->TryCancel();
}

void GrpcWorkerGroup::Shutdown() {
  {
    absl::MutexLock lock(&mutex_);
    if (shutting_down_) return;
    shutting_down_ = true;
  }
  // From here on exits are expected: they must not read as failures.
  Fail("worker group was shut down");

  // Ask every worker (even in a failed group) to exit; errors do not matter.
  // Spawned workers of an incomplete group are terminated below.
  const int num_ranks = complete_ ? static_cast<int>(ranks_.size()) : 0;
  std::vector<grpc::ClientContext> contexts(num_ranks);
  std::vector<v1::ShutdownResponse> responses(num_ranks);
  const v1::ShutdownRequest request;
  absl::Mutex done_mutex;
  int remaining = num_ranks;
  const auto deadline = absl::ToChronoTime(absl::Now() + options_.shutdown_grace);
  for (int rank = 0; rank < num_ranks; ++rank) {
    contexts[rank].set_deadline(deadline);
    AddSecret(contexts[rank], rank);
    ranks_[rank].stub->async()->Shutdown(&contexts[rank], &request, &responses[rank],
                                         [&](grpc::Status) {
                                           absl::MutexLock lock(&done_mutex);
                                           --remaining;
                                         });
  }
  {
    absl::MutexLock lock(&done_mutex);
    done_mutex.Await(absl::Condition(
        +[](int* remaining) { return *remaining == 0; }, &remaining));
  }
  for (Rank& rank : ranks_) {
    if (rank.process == nullptr) continue;
    if (!rank.process->WaitForExit(options_.shutdown_grace)) {
      rank.process->Terminate(options_.shutdown_grace);
    }
  }
  LOG(INFO) << "worker group shut down (" << world_size() << " ranks)";
}

std::string GrpcWorkerGroup::failure() const {
  if (Healthy()) return "";
  absl::MutexLock lock(&mutex_);
  if (!healthy_.load()) return failure_;
  return "workers are restarting";
}

absl::Status GrpcWorkerGroup::Recover() {
  if (given_up_.load()) return absl::UnavailableError(gave_up_);
  {
    absl::MutexLock lock(&mutex_);
    if (shutting_down_) return absl::UnavailableError("worker group was shut down");
  }
  ready_.store(false);
  absl::Duration backoff = options_.first_restart_backoff;
  std::string last_error;
  int failed_in_a_row = 0;
  while (true) {
    const absl::Time now = absl::Now();
    std::erase_if(restart_attempts_,
                  [&](absl::Time at) { return now - at > options_.restart_window; });
    // Two ways to run out: restarts that keep coming back and dying (the
    // window), and workers that never come back, each attempt of which may
    // wait out restart_start_timeout, longer than the window forgets.
    const bool storm = static_cast<int>(restart_attempts_.size()) >= options_.max_restarts;
    if (storm || failed_in_a_row >= options_.max_restarts) {
      return GiveUp(storm ? absl::StrCat(restart_attempts_.size(), " restart attempts within ",
                                         absl::FormatDuration(options_.restart_window))
                          : absl::StrCat(failed_in_a_row, " restart attempts in a row"),
                    last_error.empty() ? failure() : last_error);
    }
    restart_attempts_.push_back(now);
    LOG(WARNING) << "restarting the worker group (attempt " << restart_attempts_.size()
                 << " within the window) after: " << failure();
    absl::Status restarted = RestartOnce();
    if (restarted.ok()) {
      restarts_.fetch_add(1);
      ready_.store(true);
      LOG(INFO) << "worker group is back (" << world_size_ << " ranks)";
      return absl::OkStatus();
    }
    ++failed_in_a_row;
    last_error = std::string(restarted.message());
    LOG(WARNING) << "worker restart failed: " << last_error;
    // No wait before giving up.
    if (static_cast<int>(restart_attempts_.size()) < options_.max_restarts &&
        failed_in_a_row < options_.max_restarts) {
      absl::SleepFor(backoff);
    }
    backoff = std::min(backoff * 2, options_.max_restart_backoff);
    absl::MutexLock lock(&mutex_);
    if (shutting_down_) return absl::UnavailableError("worker group was shut down");
  }
}

absl::Status GrpcWorkerGroup::GiveUp(const std::string& how, const std::string& last_error) {
  gave_up_ = absl::StrCat("workers failed ", how, "; giving up. Last error: ", last_error);
  LOG(ERROR) << gave_up_;
  {
    absl::MutexLock lock(&mutex_);
    failure_ = gave_up_;  // Health and model info say why from now on.
  }
  healthy_.store(false);
  given_up_.store(true);  // After gave_up_ is written: readers of given_up() read it.
  return absl::UnavailableError(gave_up_);
}

absl::Status GrpcWorkerGroup::RestartOnce() {
  DropRanks();
  {
    absl::MutexLock lock(&mutex_);
    failure_.clear();
    in_flight_.clear();
  }
  healthy_.store(true);
  absl::Status started = StartRanks(absl::Now() + options_.restart_start_timeout);
  if (started.ok() && last_load_.has_value()) {
    absl::StatusOr<v1::LoadModelResponse> loaded = LoadModel(*last_load_);
    if (!loaded.ok()) {
      started = loaded.status();
    } else if (last_init_.has_value() && loaded->num_gpu_blocks() < last_init_->num_gpu_blocks()) {
      started = absl::ResourceExhaustedError(absl::StrCat(
          "restarted workers fit ", loaded->num_gpu_blocks(), " KV blocks, fewer than the ",
          last_init_->num_gpu_blocks(), " the server manages"));
    }
  }
  if (started.ok() && last_init_.has_value()) started = InitCache(*last_init_);
  if (!started.ok()) {
    Fail(std::string(started.message()));
    return started;
  }
  return absl::OkStatus();
}

}  // namespace pagoda::scheduler
