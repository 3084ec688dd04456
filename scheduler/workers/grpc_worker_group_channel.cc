// GrpcWorkerGroup's steps over spawned ranks' step channels
// (wire/frame_channel.h): one step at a time on a one-rank group
// (ExecuteStep), or pipelined on every rank of a spawned group, tensor-
// parallel ones included (SendStep, ReceiveStep: overlapped scheduling
// writes step N + 1's plan while the workers still run step N, so each rank
// reads it the moment it answers N, with no wake-up of the server between
// the two).
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "scheduler/workers/grpc_worker_group.h"
#include "wire/frame_channel.h"
#include "wire/limits.h"

namespace pagoda::scheduler {

namespace v1 = ::pagoda::worker::v1;

// How often a step waiting on the step channel looks whether the group failed.
constexpr absl::Duration kStepChannelPollPeriod = absl::Milliseconds(50);

int GrpcWorkerGroup::StepChannelFd() const {
  if (world_size() != 1) return -1;
  const std::vector<int> fds = StepChannelFds();
  return fds.empty() ? -1 : fds[0];
}

std::vector<int> GrpcWorkerGroup::StepChannelFds() const {
  std::vector<int> fds;
  if (static_cast<int>(ranks_.size()) != world_size()) return fds;
  for (const Rank& rank : ranks_) {
    if (rank.process == nullptr || rank.process->step_fd() < 0) return {};
    fds.push_back(rank.process->step_fd());
  }
  return fds;
}

absl::Status GrpcWorkerGroup::WriteStepFrames(const v1::StepPlan& plan, const StepMaskSource& masks,
                                              const std::vector<int>& fds) {
  // A failure elsewhere (a worker process exiting, Shutdown) ends the wait
  // within kStepChannelPollPeriod; the process exiting also closes the channel.
  const KeepWaiting keep_waiting = [this] { return healthy_.load(); };
  const absl::Time deadline = absl::Now() + options_.step_timeout;
  const auto write_to_every_rank = [&](const std::string& payload) {
    for (size_t rank = 0; rank < fds.size(); ++rank) {
      absl::Status io =
          WriteFrame(fds[rank], payload, deadline, keep_waiting, kStepChannelPollPeriod);
      if (!io.ok()) return absl::Status(io.code(), absl::StrCat("rank ", rank, ": ", io.message()));
    }
    return absl::OkStatus();
  };
  std::string payload(1, kStepPlanFrame);
  plan.AppendToString(&payload);
  absl::Status io = write_to_every_rank(payload);
  if (io.ok() && masks != nullptr) {
    // Computed once, while the workers run the forward pass; they read
    // these when they sample.
    payload.assign(1, kStepMasksFrame);
    masks().AppendToString(&payload);
    io = write_to_every_rank(payload);
  }
  return io;
}

absl::Status GrpcWorkerGroup::ReadReplyFrame(int fd, std::string* frame) {
  const KeepWaiting keep_waiting = [this] { return healthy_.load(); };
  return ReadFrame(fd, absl::Now() + options_.step_timeout, wire::kMaxWorkerMessageBytes, frame,
                   keep_waiting, kStepChannelPollPeriod);
}

absl::StatusOr<v1::StepResult> GrpcWorkerGroup::ExecuteStepOverChannel(const v1::StepPlan& plan,
                                                                       const StepMaskSource& masks,
                                                                       int fd) {
  {
    absl::MutexLock lock(&mutex_);
    if (!healthy_.load()) return absl::UnavailableError(failure_);
  }
  std::string frame;
  absl::Status io = WriteStepFrames(plan, masks, {fd});
  if (io.ok()) io = ReadReplyFrame(fd, &frame);
  return StepResultOfReplies({io}, {frame});
}

absl::Status GrpcWorkerGroup::SendStep(const v1::StepPlan& plan, const StepMaskSource& masks) {
  const bool masks_follow = PromisesTokenMasks(plan);
  if (masks_follow && masks == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", plan.step_id(), " promises token masks but has no source"));
  }
  {
    absl::MutexLock lock(&mutex_);
    if (!healthy_.load()) return absl::UnavailableError(failure_);
  }
  const absl::Status io = WriteStepFrames(plan, masks_follow ? masks : nullptr, StepChannelFds());
  if (io.ok()) return io;
  // Part of a frame may be on a channel: it cannot be used again.
  if (healthy_.load()) Fail(absl::StrCat("worker step channel failed: ", io.ToString()));
  absl::MutexLock lock(&mutex_);
  return absl::UnavailableError(failure_);
}

absl::StatusOr<v1::StepResult> GrpcWorkerGroup::ReceiveStep() {
  {
    absl::MutexLock lock(&mutex_);
    if (!healthy_.load()) return absl::UnavailableError(failure_);
  }
  // Every rank answers every step (rank 0's answer has the tokens), so
  // each rank's channel holds that step's reply next.
  const std::vector<int> fds = StepChannelFds();
  std::vector<absl::Status> io(fds.size());
  std::vector<std::string> frames(fds.size());
  for (size_t rank = 0; rank < fds.size(); ++rank) {
    io[rank] = ReadReplyFrame(fds[rank], &frames[rank]);
    if (io[rank].ok()) continue;
    // The group fails: the other ranks' answers no longer matter.
    for (size_t later = rank + 1; later < fds.size(); ++later) io[later] = io[rank];
    break;
  }
  return StepResultOfReplies(io, frames);
}

}  // namespace pagoda::scheduler
