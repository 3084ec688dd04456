#ifndef PAGODA_WORKER_COMM_UNIQUE_ID_RELAY_H_
#define PAGODA_WORKER_COMM_UNIQUE_ID_RELAY_H_

// ShareUniqueId: rank 0's opaque group id (NCCL's unique id) relayed to every
// rank through the server's rendezvous store.

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/rendezvous_store_client.h"

namespace pagoda::worker::comm {

// Gives every rank of a group the same opaque id that rank 0 makes (NCCL's
// unique id, see CreateNcclUniqueId), relayed by the server: rank 0 calls
// `create` and publishes the bytes in the group's rendezvous store (the one
// LoadModel names, run by pagoda-server); every other rank waits for them
// there, up to `timeout`. No shared filesystem, and the server never needs to
// call rank 0 first.
//
// Returns the id on every rank. INVALID_ARGUMENT when `create` returns other
// than `id_bytes` bytes or rank < 0; the store client's errors (UNAVAILABLE,
// PERMISSION_DENIED, DEADLINE_EXCEEDED when rank 0 never publishes).
absl::StatusOr<std::string> ShareUniqueId(
    const RendezvousAddress& rendezvous, int rank, std::chrono::milliseconds timeout,
    size_t id_bytes, const std::function<absl::StatusOr<std::string>()>& create);

}  // namespace pagoda::worker::comm

#endif  // PAGODA_WORKER_COMM_UNIQUE_ID_RELAY_H_
