#ifndef PAGODA_WORKER_COMM_GLOO_COMMUNICATOR_H_
#define PAGODA_WORKER_COMM_GLOO_COMMUNICATOR_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/collective_communicator.h"
#include "worker/comm/rendezvous_store_client.h"
#include "wire/limits.h"

namespace pagoda::worker::comm {

// How a CPU rank joins its group: Gloo's TCP transport, with the peers'
// addresses exchanged through a RendezvousStoreServer.
struct GlooOptions {
  int rank = 0;
  int world_size = 1;
  RendezvousAddress rendezvous;
  // The address this rank's Gloo pairs listen on; peers must reach it.
  std::string listen_host = "127.0.0.1";
  // Bounds every collective, and joining the group: peers that have not
  // all arrived within `timeout` end the join (see CreateGlooCommunicator).
  std::chrono::milliseconds timeout{30000};
  // What every rank proves it knows to every peer, over the group's new
  // connections, before any tensor moves (collective_proof.h): LoadModel's
  // rendezvous secret. Required above one rank.
  std::string group_secret;
};

// A join try (pairs connected, secret proved) gets this long at first, and
// twice as long after a try that ran out of time (at most `timeout`): on an
// idle machine a try takes a few milliseconds.
inline constexpr std::chrono::milliseconds kFirstGlooTryTimeout{250};
// A bound on tries (and on the store keys they use) beside the deadline.
inline constexpr int kMaxGlooJoinTries = 64;

// Joins the group. INVALID_ARGUMENT for a rank outside [0, world_size) or
// world_size outside [1, wire::kMaxWorldSize].
//
// Authenticated: Gloo's TCP pairs each listen on a port the OS picks and
// take the first connection that reaches it, from anyone. So each try
// (store keys under "<prefix>/try<k>"): every rank posts "ready" and waits
// for all (no listener opens while a peer is still on its way), opens its
// pairs and connects them (gloo_mesh.h), then runs ProveGroupSecret over
// the new pairs with this communicator's own send/recv; then every rank
// posts its verdict to the store (whose connections need the secret) and
// reads everyone's. All ranks see the same verdicts, so either all return
// the group or all drop it and try again with fresh listeners. A rank whose
// try fails says so in the store at once (kTryAbortKey) and its peers abort
// theirs: a try taken by an intruder costs milliseconds, not the timeout,
// unless it leaves no rank an error to see (then it ends at the try's
// deadline). Tries go on until one succeeds, until `timeout` after the call
// has passed, or kMaxGlooJoinTries; then the last try's error comes back
// (PERMISSION_DENIED for a failed proof, ABORTED for a try a peer gave up).
// A rank that never arrives ends the join with DEADLINE_EXCEEDED at
// `timeout`; one that vanishes mid-try, within (world_size + 1) x that try's
// time (at most `timeout`): the whole join ends within (world_size + 2) x
// `timeout`. An intruder can
// make tries fail (as it can refuse any service it can reach) but never
// join: a returned group has only ranks that proved the secret on every
// connection.
//
// Algorithm (why not Gloo's ring): tensor-parallel groups are small and most
// all-reduces are decode-sized, so one round in which every rank sends its
// buffer to every peer beats 2 (N - 1) ring rounds on latency, and summing the
// N contributions in rank order on every rank gives bitwise identical results
// everywhere. f16/bf16 travel and sum as f32 and are rounded once. Abort uses
// Gloo's per-buffer abort, which Gloo's built-in collectives do not expose.
absl::StatusOr<std::unique_ptr<CollectiveCommunicator>> CreateGlooCommunicator(
    const GlooOptions& options);

}  // namespace pagoda::worker::comm

#endif  // PAGODA_WORKER_COMM_GLOO_COMMUNICATOR_H_
