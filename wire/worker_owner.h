// One owner per worker: the server that first loads a model on a worker owns
// it, and every call a server makes carries its owner id in this metadata
// entry (beside the secret). A worker refuses another server's calls with
// FAILED_PRECONDITION, so two servers handed the same worker (a chart or
// flag mistake) can never interleave their steps on it.
#ifndef PAGODA_WIRE_WORKER_OWNER_H_
#define PAGODA_WIRE_WORKER_OWNER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace pagoda::wire {

inline constexpr char kWorkerOwnerMetadataKey[] = "x-pagoda-worker-owner";
// An owner id is 32 lowercase hex digits (16 random bytes).
inline constexpr size_t kWorkerOwnerIdLength = 32;
// How often an owning server reminds its workers it is alive (Heartbeat)
// while it has nothing else to send.
inline constexpr absl::Duration kOwnerHeartbeatPeriod = absl::Seconds(1);

// 16 random bytes from the kernel, hex-encoded: one server process's owner id.
absl::StatusOr<std::string> GenerateWorkerOwnerId();

// INVALID_ARGUMENT unless `id` is kWorkerOwnerIdLength lowercase hex digits.
absl::Status ValidateWorkerOwnerId(absl::string_view id);

}  // namespace pagoda::wire

#endif  // PAGODA_WIRE_WORKER_OWNER_H_
