#ifndef PAGODA_WIRE_FRAME_CHANNEL_H_
#define PAGODA_WIRE_FRAME_CHANNEL_H_

// The step channel's framing: length-prefixed frames of step plans, masks and
// replies over a socket between pagoda-server and a worker it spawned.

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "wire/limits.h"

namespace pagoda {

// Length-prefixed messages over a connected stream socket: a frame is its
// payload's length as 8 little-endian bytes, then the payload. The step
// channel between pagoda-server and a worker it spawned carries its step
// plans and replies so (scheduler/workers/worker_launcher.h): two system calls
// and one wake-up each way, where a gRPC call hops through several threads.

// The largest payload a step channel carries: the bound of gRPC calls to
// workers (wire/limits.h).
inline constexpr uint64_t kMaxFrameBytes = wire::kMaxWorkerMessageBytes;

// The step channel's frames from the server: a kind byte, then the
// serialized message: a StepPlan, then, when the plan promises token masks
// (SequenceStep.token_mask_follows), its StepMasks, sent while the worker
// runs the forward pass. The worker answers each plan with a StepReply
// (no kind byte: it sends nothing else).
inline constexpr char kStepPlanFrame = 'P';
inline constexpr char kStepMasksFrame = 'M';

// Called between waits (at least every `poll_period`); returning false gives
// up the wait with CANCELLED.
using KeepWaiting = std::function<bool()>;

// Writes one frame. Errors: UNAVAILABLE (the peer is gone or the socket
// failed), DEADLINE_EXCEEDED, CANCELLED. Never raises SIGPIPE. After an
// error the channel may hold part of a frame and must not be used again.
absl::Status WriteFrame(int fd, absl::string_view payload, absl::Time deadline,
                        const KeepWaiting& keep_waiting = nullptr,
                        absl::Duration poll_period = absl::Milliseconds(100));

// Reads one frame into `payload`. Errors: UNAVAILABLE (end of file or a
// socket error), DEADLINE_EXCEEDED, CANCELLED, INVALID_ARGUMENT (the length
// prefix exceeds `max_bytes`, so the peer is not speaking this protocol).
// After an error the channel must not be used again.
absl::Status ReadFrame(int fd, absl::Time deadline, uint64_t max_bytes, std::string* payload,
                       const KeepWaiting& keep_waiting = nullptr,
                       absl::Duration poll_period = absl::Milliseconds(100));

}  // namespace pagoda

#endif  // PAGODA_WIRE_FRAME_CHANNEL_H_
