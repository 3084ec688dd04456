#ifndef PAGODA_WORKER_COMM_TCP_COMMUNICATOR_H_
#define PAGODA_WORKER_COMM_TCP_COMMUNICATOR_H_

// The TCP CollectiveCommunicator of CPU tensor-parallel groups: one proved
// connection per pair of ranks.

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "wire/limits.h"
#include "worker/comm/collective_communicator.h"
#include "worker/comm/rendezvous_store_client.h"

namespace pagoda::worker::comm {

// How a CPU rank joins its group: one proved TCP connection per pair of
// ranks (tcp_mesh.h says why not Gloo), the peers' addresses exchanged
// through a RendezvousStoreServer.
struct TcpCollectiveOptions {
  int rank = 0;
  int world_size = 1;
  RendezvousAddress rendezvous;
  // The address this rank listens on during the join; peers must reach it.
  std::string listen_host = "127.0.0.1";
  // Bounds every collective, and joining the group: peers that have not all
  // connected within `timeout` end the join with DEADLINE_EXCEEDED.
  std::chrono::milliseconds timeout{30000};
  // What every connection proves at both ends before it carries anything
  // else (tcp_mesh.h): LoadModel's rendezvous secret. Required above one
  // rank.
  std::string group_secret;
};

// Joins the group. INVALID_ARGUMENT for a rank outside [0, world_size),
// world_size outside [1, wire::kMaxWorldSize], a non-positive timeout or a
// secret outside the worker secret's bounds; then TcpMesh::Join's statuses.
// An intruder that reaches the listener is dropped after its 80-byte hello
// fails: it can neither join nor fail the join.
//
// Algorithm: tensor-parallel groups are small and most all-reduces are
// decode-sized, so one round in which every rank sends its buffer to every
// peer beats 2 (N - 1) ring rounds on latency, and summing the N
// contributions in rank order on every rank gives bitwise identical results
// everywhere. f16/bf16 travel and sum as f32 and are rounded once. Every
// message carries the collective's sequence number and size, checked before
// its payload is read: a peer out of step fails the collective (DATA_LOSS)
// instead of filling a buffer with the wrong collective's bytes.
absl::StatusOr<std::unique_ptr<CollectiveCommunicator>> CreateTcpCommunicator(
    const TcpCollectiveOptions& options);

}  // namespace pagoda::worker::comm

#endif  // PAGODA_WORKER_COMM_TCP_COMMUNICATOR_H_
