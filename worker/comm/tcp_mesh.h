#ifndef PAGODA_WORKER_COMM_TCP_MESH_H_
#define PAGODA_WORKER_COMM_TCP_MESH_H_

// One TCP connection between every two ranks of a group, each proved at
// both ends before it carries a byte of anything else.
//
// Why by hand, and not Gloo's TCP transport (which Pagoda used before): a
// Gloo pair (Debian's 0.0~git20220518) listens on its own port, takes the
// first connection that arrives, and reads what comes in as message headers
// on its event thread. A header that names a slot nobody posted fails a
// GLOO_ENFORCE there, uncaught: std::terminate. So any local process that
// reached a listener during a join (it sees the port in /proc/net/tcp within
// microseconds) could end a worker with 48 bytes, at every restart; a proof
// of the secret run over the pairs afterwards came too late. No Debian
// package offers collectives whose connections authenticate before they
// parse, and what the CPU runner needs (all-reduce and all-gather among a
// few ranks, tcp_communicator.h) is small.
//
// The handshake, for the pair of ranks a < c (c connects to a's listener):
//   a -> c: nonce_a (kProofNonceBytes, fresh from the kernel's CSPRNG)
//   c -> a: "PGDMESH1", c, a (u32 each), nonce_c, tag_c
//   a -> c: tag_a
// where tag_x = ProofTag(secret, "<group>/pair/<a>/<c>", world, x,
// nonce_a || nonce_c) (collective_proof.h: HMAC-SHA256). Each side's tag
// covers the other side's fresh nonce, so nothing recorded from another
// connection verifies; it names its sender, so it cannot be reflected; the
// group (the launch's rendezvous prefix) keeps launches apart. The listening
// side reads exactly 80 bytes of fixed layout from a connection before it
// decides, answers many connections at once (an intruder that sends
// nothing holds up no rank), and drops every connection that fails: an
// intruder costs a rank one accept and one HMAC, never the join.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/comm/rendezvous_store_client.h"

namespace pagoda::worker::comm {

struct TcpMeshOptions {
  int rank = 0;
  int world_size = 1;
  // The IPv4 address this rank listens on; its peers must reach it.
  std::string listen_host = "127.0.0.1";
  std::string secret;  // What every connection proves (the rendezvous secret).
  std::string group;   // Names this group in every tag (the rendezvous prefix).
};

// Connections the listening side handshakes with at once; more are closed
// on arrival until one of them ends.
inline constexpr int kMaxPendingHandshakes = 64;

// The group's connections. Thread safety: Shutdown() from any thread; the
// rest from the owner's.
class TcpMesh {
 public:
  // Listens, posts "addr<rank>" to `store`, connects to every lower rank and
  // takes one proved connection from every higher rank, all before
  // `deadline`. DEADLINE_EXCEEDED when a peer never comes, PERMISSION_DENIED
  // when a lower rank's listener fails the proof (an intruder never fails
  // the listening side: it is dropped), UNAVAILABLE for a peer that cannot
  // be reached, the store's error when the store fails.
  // `store` may be null at world size 1 (no peer, nothing to post).
  static absl::StatusOr<std::unique_ptr<TcpMesh>> Join(
      const TcpMeshOptions& options, RendezvousStoreClient* store,
      std::chrono::steady_clock::time_point deadline);
  ~TcpMesh();
  TcpMesh(const TcpMesh&) = delete;
  TcpMesh& operator=(const TcpMesh&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return static_cast<int>(fds_.size()); }
  // The non-blocking socket to `peer` (-1 for this rank).
  int fd(int peer) const { return fds_[peer]; }
  // Shuts every connection down (both directions): this rank's pending I/O
  // wakes up, and the peers see the group end. The sockets stay open until
  // destruction, so no descriptor is reused under a reader.
  void Shutdown();

 private:
  TcpMesh(int rank, std::vector<int> fds) : rank_(rank), fds_(std::move(fds)) {}

  const int rank_;
  const std::vector<int> fds_;
};

}  // namespace pagoda::worker::comm

#endif  // PAGODA_WORKER_COMM_TCP_MESH_H_
