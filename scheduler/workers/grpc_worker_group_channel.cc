// GrpcWorkerGroup's steps over a spawned rank's step channel
// (wire/frame_channel.h): one step at a time (ExecuteStep) or pipelined
// (SendStep, ReceiveStep: overlapped scheduling writes step N + 1's plan
// while the worker still runs step N, so the worker reads it the moment it
// answers N, with no wake-up of the server between the two).
#include <string>

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
  if (world_size() != 1 || ranks_.empty() || ranks_[0].process == nullptr) return -1;
  return ranks_[0].process->step_fd();
}

absl::Status GrpcWorkerGroup::WriteStepFrames(const v1::StepPlan& plan, const StepMaskSource& masks,
                                              int fd) {
  // A failure elsewhere (the worker process exiting, Shutdown) ends the wait
  // within kStepChannelPollPeriod; the process exiting also closes the channel.
  const KeepWaiting keep_waiting = [this] { return healthy_.load(); };
  const absl::Time deadline = absl::Now() + options_.step_timeout;
  std::string payload(1, kStepPlanFrame);
  plan.AppendToString(&payload);
  absl::Status io = WriteFrame(fd, payload, deadline, keep_waiting, kStepChannelPollPeriod);
  if (io.ok() && masks != nullptr) {
    // While the worker runs the forward pass; it reads these when it samples.
    payload.assign(1, kStepMasksFrame);
    masks().AppendToString(&payload);
    io = WriteFrame(fd, payload, deadline, keep_waiting, kStepChannelPollPeriod);
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
  absl::Status io = WriteStepFrames(plan, masks, fd);
  if (io.ok()) io = ReadReplyFrame(fd, &frame);
  return StepResultOfReply(io, frame);
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
  const absl::Status io = WriteStepFrames(plan, masks_follow ? masks : nullptr, StepChannelFd());
  if (io.ok()) return io;
  // Part of a frame may be on the channel: it cannot be used again.
  if (healthy_.load()) Fail(absl::StrCat("worker rank 0 step channel failed: ", io.ToString()));
  absl::MutexLock lock(&mutex_);
  return absl::UnavailableError(failure_);
}

absl::StatusOr<v1::StepResult> GrpcWorkerGroup::ReceiveStep() {
  {
    absl::MutexLock lock(&mutex_);
    if (!healthy_.load()) return absl::UnavailableError(failure_);
  }
  std::string frame;
  const absl::Status io = ReadReplyFrame(StepChannelFd(), &frame);
  return StepResultOfReply(io, frame);
}

}  // namespace pagoda::scheduler
