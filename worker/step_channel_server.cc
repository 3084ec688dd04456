#include "worker/step_channel_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "google/protobuf/arena.h"
#include "wire/frame_channel.h"

namespace pagoda::worker {
namespace {

namespace v1 = ::pagoda::worker::v1;

// A reply the server stopped reading for this long is abandoned with the
// channel (the server has given up on this worker by then).
constexpr absl::Duration kReplyTimeout = absl::Seconds(60);
// The masks a plan promised come within the server's step deadline (60 s);
// a wait past it is for a server that gave up.
constexpr absl::Duration kMasksTimeout = absl::Seconds(60);

// The reply to one frame that should hold a plan.
v1::StepReply ExecuteFrame(WorkerService& service, absl::string_view frame,
                           const StepMaskWait& wait_for_masks) {
  v1::StepReply reply;
  // A plan of a thousand rows is thousands of small messages: an arena takes
  // them in a few blocks, freed at once after the step.
  google::protobuf::ArenaOptions options;
  options.start_block_size = 16 << 10;
  options.max_block_size = 1 << 20;
  google::protobuf::Arena arena(options);
  v1::StepPlan& plan = *google::protobuf::Arena::CreateMessage<v1::StepPlan>(&arena);
  if (frame.empty() || frame[0] != kStepPlanFrame ||
      !plan.ParseFromArray(frame.data() + 1, static_cast<int>(frame.size() - 1))) {
    reply.set_code(static_cast<int>(absl::StatusCode::kInvalidArgument));
    reply.set_message("step channel: the frame is not a StepPlan");
  } else if (absl::StatusOr<v1::StepResult> result =
                 service.ExecuteLocalStep(&plan, wait_for_masks);
             result.ok()) {
    *reply.mutable_result() = *std::move(result);
  } else {
    reply.set_code(static_cast<int>(result.status().code()));
    reply.set_message(std::string(result.status().message()));
  }
  return reply;
}

}  // namespace

StepChannelServer::StepChannelServer(int fd, WorkerService* service)
    : fd_(fd), service_(service), thread_(&StepChannelServer::Serve, this) {}

StepChannelServer::~StepChannelServer() {
  Stop();
  thread_.join();
  close(fd_);
}

void StepChannelServer::Stop() {
  if (stopping_.exchange(true)) return;
  // Wakes a read waiting for the next plan at once; a step in progress still
  // writes its reply (shutdown of the read side only).
  shutdown(fd_, SHUT_RD);
}

void StepChannelServer::Serve() {
  ServeFrames();
  // Whatever ended serving, the server sees end of file at once rather than
  // wait out its deadline on a channel nobody reads.
  shutdown(fd_, SHUT_RDWR);
}

absl::StatusOr<v1::StepMasks> StepChannelServer::ReadMasks() {
  const KeepWaiting keep_waiting = [this] { return !stopping_.load(); };
  std::string frame;
  absl::Status read =
      ReadFrame(fd_, absl::Now() + kMasksTimeout, kMaxFrameBytes, &frame, keep_waiting);
  if (read.ok() && (frame.empty() || frame[0] != kStepMasksFrame)) {
    read = absl::DataLossError("the frame after a plan that promised masks is not its masks");
  }
  v1::StepMasks masks;
  if (read.ok() && !masks.ParseFromArray(frame.data() + 1, static_cast<int>(frame.size() - 1))) {
    read = absl::DataLossError("the masks frame is not a StepMasks");
  }
  if (!read.ok()) {
    // The channel is out of step (or gone): this step fails as a fault
    // (UNAVAILABLE, not the device's), and serving ends after its reply.
    out_of_step_ = true;
    return absl::UnavailableError(absl::StrCat("step channel: ", read.message()));
  }
  return masks;
}

void StepChannelServer::ServeFrames() {
  const KeepWaiting keep_waiting = [this] { return !stopping_.load(); };
  const StepMaskWait wait_for_masks = [this] { return ReadMasks(); };
  std::string frame;
  while (!stopping_.load() && !out_of_step_) {
    const absl::Status read =
        ReadFrame(fd_, absl::InfiniteFuture(), kMaxFrameBytes, &frame, keep_waiting);
    if (!read.ok()) {
      // End of file: the server closed the channel (it is stopping or gone).
      if (read.code() != absl::StatusCode::kUnavailable && !stopping_.load()) {
        LOG(WARNING) << "step channel closed: " << read;
      }
      return;
    }
    // The masks of a plan refused (or failed) before it read them: the
    // server sends them regardless, and nothing waits for them now.
    if (!frame.empty() && frame[0] == kStepMasksFrame) continue;
    const v1::StepReply reply = ExecuteFrame(*service_, frame, wait_for_masks);
    if (absl::Status written =
            WriteFrame(fd_, reply.SerializeAsString(), absl::Now() + kReplyTimeout);
        !written.ok()) {
      LOG(WARNING) << "step channel: cannot reply: " << written;
      return;
    }
  }
}

}  // namespace pagoda::worker
