#include "worker/step_channel_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/time/clock.h"
#include "glog/logging.h"
#include "wire/frame_channel.h"

namespace pagoda::worker {
namespace {

namespace v1 = ::pagoda::worker::v1;

// A reply the server stopped reading for this long is abandoned with the
// channel (the server has given up on this worker by then).
constexpr absl::Duration kReplyTimeout = absl::Seconds(60);

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

void StepChannelServer::ServeFrames() {
  const KeepWaiting keep_waiting = [this] { return !stopping_.load(); };
  std::string frame;
  while (!stopping_.load()) {
    const absl::Status read =
        ReadFrame(fd_, absl::InfiniteFuture(), kMaxFrameBytes, &frame, keep_waiting);
    if (!read.ok()) {
      // End of file: the server closed the channel (it is stopping or gone).
      if (read.code() != absl::StatusCode::kUnavailable && !stopping_.load()) {
        LOG(WARNING) << "step channel closed: " << read;
      }
      return;
    }
    v1::StepReply reply;
    v1::StepPlan plan;
    if (!plan.ParseFromString(frame)) {
      reply.set_code(static_cast<int>(absl::StatusCode::kInvalidArgument));
      reply.set_message("step channel: the frame is not a StepPlan");
    } else if (absl::StatusOr<v1::StepResult> result = service_->ExecuteLocalStep(plan);
               result.ok()) {
      *reply.mutable_result() = *std::move(result);
    } else {
      reply.set_code(static_cast<int>(result.status().code()));
      reply.set_message(std::string(result.status().message()));
    }
    if (absl::Status written =
            WriteFrame(fd_, reply.SerializeAsString(), absl::Now() + kReplyTimeout);
        !written.ok()) {
      LOG(WARNING) << "step channel: cannot reply: " << written;
      return;
    }
  }
}

}  // namespace pagoda::worker
