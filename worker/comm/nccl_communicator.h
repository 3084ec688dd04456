#ifndef PAGODA_WORKER_COMM_NCCL_COMMUNICATOR_H_
#define PAGODA_WORKER_COMM_NCCL_COMMUNICATOR_H_

// The NCCL CollectiveCommunicator of CUDA tensor-parallel groups, and rank 0's
// NCCL unique id that the server relays.

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
  // What every rank proves it knows to every peer over NCCL's new
  // connections before any tensor moves (collective_proof.h; the group is
  // named by `unique_id`): LoadModel's rendezvous secret. Required above one
  // rank.
  std::string group_secret;
};

// Joins the group (non-blocking NCCL init, polled against the timeout;
// ncclCommAbort on timeout). Collectives are enqueued on the stream and then
// polled until complete, the timeout passes (ncclCommAbort, then
// DEADLINE_EXCEEDED), NCCL reports an asynchronous error (UNAVAILABLE) or
// Abort() is called (ABORTED). Pointers are device memory. Once NCCL's
// init is done, the ranks run ProveGroupSecret through the communicator's own
// AllGather (a few hundred bytes staged through device memory); a failed
// proof aborts the communicator and returns PERMISSION_DENIED, and the
// server's group restart is the retry (NCCL's bootstrap cannot be retried
// with the same unique id).
absl::StatusOr<std::unique_ptr<CollectiveCommunicator>> CreateNcclCommunicator(
    const NcclOptions& options);

}  // namespace pagoda::worker::comm

#endif  // PAGODA_WORKER_COMM_NCCL_COMMUNICATOR_H_
