#ifndef PAGODA_WORKER_TENSOR_PARALLEL_GROUP_H_
#define PAGODA_WORKER_TENSOR_PARALLEL_GROUP_H_

// A LoadModel request's tensor-parallel membership checked, and the group of
// ranks joined through the server's rendezvous store.

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "pagoda/worker/v1/worker.pb.h"
#include "wire/limits.h"
#include "worker/comm/rendezvous_store_client.h"
#include "worker/communicator.h"

namespace pagoda::worker {

// Bounds of LoadModelRequest.collective_timeout_ms (0 = the default).
inline constexpr std::chrono::milliseconds kDefaultCollectiveTimeout{30000};
inline constexpr std::chrono::milliseconds kMaxCollectiveTimeout{600000};

// A LoadModel request's tensor-parallel fields, checked: rank in
// [0, world_size), world_size in [1, wire::kMaxWorldSize], and for more than
// one rank a rendezvous address "IPv4:port", a secret and a prefix.
// INVALID_ARGUMENT naming the field otherwise.
struct GroupMembership {
  int rank = 0;
  int world_size = 1;
  comm::RendezvousAddress rendezvous;
  std::chrono::milliseconds timeout = kDefaultCollectiveTimeout;
};
absl::StatusOr<GroupMembership> ParseGroupMembership(
    const pagoda::worker::v1::LoadModelRequest& request);

// How the ranks of a group reach each other once the request was checked:
// TCP (comm/tcp_communicator.h) for the CPU runner (TcpTransport), NCCL for the CUDA runner
// (worker/cuda/nccl_transport.h). Called only for world_size > 1; blocks until
// every rank joined or the membership's timeout passed (DEADLINE_EXCEEDED /
// UNAVAILABLE).
using GroupTransport =
    std::function<absl::StatusOr<std::unique_ptr<Communicator>>(const GroupMembership&)>;

// The one group-joining path of every runner. For one rank: a single-rank
// communicator, no transport. For more: checks that the model in `model_dir`
// splits over the group (CheckTensorParallelSplit) before joining, so every
// rank refuses alike and none waits for the others, then joins through
// `transport`.
absl::StatusOr<std::unique_ptr<Communicator>> JoinGroup(const GroupMembership& membership,
                                                        const std::string& model_dir,
                                                        const GroupTransport& transport);

// The TCP communicator, listening on `listen_host` while the group joins.
GroupTransport TcpTransport(std::string listen_host);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_TENSOR_PARALLEL_GROUP_H_
