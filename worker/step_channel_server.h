#ifndef PAGODA_WORKER_STEP_CHANNEL_SERVER_H_
#define PAGODA_WORKER_STEP_CHANNEL_SERVER_H_

// StepChannelServer: the worker's end of the step channel (--step-fd), step
// plans in and replies out, one at a time.

#include <atomic>
#include <thread>

#include "worker/worker_service.h"

namespace pagoda::worker {

// The worker's end of the step channel a spawning server hands it (--step-fd;
// scheduler/workers/worker_launcher.h): reads StepPlan frames
// (wire/frame_channel.h), runs each through WorkerService::ExecuteLocalStep
// and writes back a StepReply, one at a time, on its own thread. A plan
// that promises token masks reads them, the next frame, when its sampler
// needs them (after the forward pass); a masks frame that arrives when a
// plan is expected belongs to a plan refused before it read them and is
// dropped. Anything else where masks are due puts the channel out of step:
// that step fails UNAVAILABLE and serving ends. That thread
// is then the one that drives every forward pass, so the compute threads
// always meet the same caller.
//
// The socket is inherited, never bound to a path, so only the server that
// made it can send on it; a frame that does not parse as a StepPlan gets
// INVALID_ARGUMENT, and a length prefix past kMaxFrameBytes (a peer not
// speaking the protocol) closes the channel. Serving ends when the server
// closes its end, or on Stop().
class StepChannelServer {
 public:
  // Takes ownership of `fd`; `service` must outlive this object.
  StepChannelServer(int fd, WorkerService* service);
  // Stops, waits for the step in progress (if any) and closes the socket.
  ~StepChannelServer();
  StepChannelServer(const StepChannelServer&) = delete;
  StepChannelServer& operator=(const StepChannelServer&) = delete;

  // Ends serving once the step in progress (if any) has replied. Idempotent.
  void Stop();

 private:
  void Serve();
  void ServeFrames();
  // The masks frame that follows the plan in progress (StepMaskWait).
  absl::StatusOr<pagoda::worker::v1::StepMasks> ReadMasks();

  const int fd_;
  WorkerService* const service_;
  std::atomic<bool> stopping_{false};
  bool out_of_step_ = false;  // Serving thread only.
  std::thread thread_;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_STEP_CHANNEL_SERVER_H_
