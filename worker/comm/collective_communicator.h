#ifndef PAGODA_WORKER_COMM_COLLECTIVE_COMMUNICATOR_H_
#define PAGODA_WORKER_COMM_COLLECTIVE_COMMUNICATOR_H_

// CollectiveCommunicator: the typed collectives (all-reduce sum,
// all-gather) a tensor-parallel group runs, over TCP on the CPU or NCCL on CUDA.

#include <chrono>
#include <cstddef>

#include "absl/status/status.h"
#include "common/dtype.h"

namespace pagoda::worker::comm {

// Typed collectives across the ranks of one tensor-parallel group.
//
// Every rank must issue the same sequence of collectives with the same
// counts and dtypes. Pointers are memory of the communicator's device: host
// memory for the TCP communicator, device memory for NCCL (where the call is enqueued on the
// communicator's stream and waited for before returning, so a returned OK
// means the data is in place).
//
// Failure is sticky: after a collective fails (timeout, a dead peer, Abort)
// every later collective fails at once with the same kind of status, so a
// broken group is never half-used. Rebuild the group to recover.
//
// Thread safety: collectives from one thread at a time; Abort() from any
// thread, at any time, any number of times.
class CollectiveCommunicator {
 public:
  virtual ~CollectiveCommunicator() = default;

  // In place: data[i] = sum over ranks of data[i], for i < count. Every rank
  // ends with bitwise identical values. f16/bf16 are summed in f32 and rounded
  // once where the backend allows (TCP); NCCL sums in the element type.
  // DEADLINE_EXCEEDED after the timeout, UNAVAILABLE when a peer is gone,
  // ABORTED after Abort().
  virtual absl::Status AllReduceSum(void* data, size_t count, DType dtype) = 0;

  // In place: `data` holds world_size() * count elements; this rank's own
  // elements are already at [rank() * count, (rank() + 1) * count) and on
  // return rank r's elements are at [r * count, (r + 1) * count). Same
  // statuses as AllReduceSum.
  virtual absl::Status AllGather(void* data, size_t count, DType dtype) = 0;

  // Makes the pending collective (if any) and every later one fail with
  // ABORTED promptly, and tears down the connections so the peers' pending
  // collectives fail too instead of waiting for their timeout.
  virtual void Abort() = 0;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
};

// Bounds every communicator enforces on one collective, so a corrupted count
// fails as INVALID_ARGUMENT instead of an allocation of terabytes.
inline constexpr size_t kMaxCollectiveBytes = size_t{1} << 32;  // 4 GiB per rank

// Shared argument checks: a KV-cache-only dtype (FP8), null data with a
// nonzero count, count * size of dtype * world over kMaxCollectiveBytes.
// `what` names the collective.
absl::Status ValidateCollectiveArgs(const void* data, size_t count, DType dtype, int world_size,
                                    const char* what);

}  // namespace pagoda::worker::comm

#endif  // PAGODA_WORKER_COMM_COLLECTIVE_COMMUNICATOR_H_
