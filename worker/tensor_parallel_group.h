#ifndef PAGODA_WORKER_TENSOR_PARALLEL_GROUP_H_
#define PAGODA_WORKER_TENSOR_PARALLEL_GROUP_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "pagoda/worker/v1/worker.pb.h"
#include "worker/comm/rendezvous_store_client.h"
#include "worker/communicator.h"

namespace pagoda::worker {

// Bounds of LoadModelRequest.collective_timeout_ms (0 = the default).
inline constexpr std::chrono::milliseconds kDefaultCollectiveTimeout{30000};
inline constexpr std::chrono::milliseconds kMaxCollectiveTimeout{600000};

// A LoadModel request's tensor-parallel fields, checked: rank in
// [0, world_size), world_size in [1, comm::kMaxWorldSize], and for more than
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

// Joins the CPU group of `membership` over Gloo, its connections listening on
// `listen_host` (a single-rank communicator when world_size is 1). Blocks
// until every rank joined or the timeout passed (DEADLINE_EXCEEDED /
// UNAVAILABLE).
absl::StatusOr<std::unique_ptr<Communicator>> JoinCpuGroup(const GroupMembership& membership,
                                                           const std::string& listen_host);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_TENSOR_PARALLEL_GROUP_H_
