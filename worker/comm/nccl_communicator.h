#ifndef PAGODA_WORKER_COMM_NCCL_COMMUNICATOR_H_
#define PAGODA_WORKER_COMM_NCCL_COMMUNICATOR_H_

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/collective_communicator.h"

// Built only with CUDA and NCCL (target pagoda_comm_nccl).
namespace pagoda::worker::comm {

// Size of ncclUniqueId: the bytes rank 0 creates and the server relays to
// every rank in LoadModel.
inline constexpr size_t kNcclUniqueIdBytes = 128;

// Rank 0 calls this, as ShareUniqueId's `create` (unique_id_relay.h): the
// bytes reach the other ranks through the server's rendezvous store named in
// LoadModel. It starts NCCL's bootstrap listener in this process, which must
// outlive the group's init.
absl::StatusOr<std::string> CreateNcclUniqueId();

struct NcclOptions {
  int rank = 0;
  int world_size = 1;
  int device = 0;         // CUDA device of this rank.
  std::string unique_id;  // kNcclUniqueIdBytes bytes from CreateNcclUniqueId.
  // Collectives run on this stream (a cudaStream_t); null: the communicator
  // creates and owns one.
  void* stream = nullptr;
  // Bounds joining the group and every collective.
  std::chrono::milliseconds timeout{30000};
};

// Joins the group (non-blocking NCCL init, polled against the timeout;
// ncclCommAbort on timeout). Collectives are enqueued on the stream and then
// polled until complete, the timeout passes (ncclCommAbort, then
// DEADLINE_EXCEEDED), NCCL reports an asynchronous error (UNAVAILABLE) or
// Abort() is called (ABORTED). Pointers are device memory.
absl::StatusOr<std::unique_ptr<CollectiveCommunicator>> CreateNcclCommunicator(
    const NcclOptions& options);

}  // namespace pagoda::worker::comm

#endif  // PAGODA_WORKER_COMM_NCCL_COMMUNICATOR_H_
