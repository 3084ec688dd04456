#ifndef PAGODA_WORKER_COMM_COLLECTIVE_PROOF_H_
#define PAGODA_WORKER_COMM_COLLECTIVE_PROOF_H_

// The proof that every rank of a newly connected group holds the group's
// secret, run over the group's own connections before any tensor moves.

#include <cstddef>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pagoda::worker::comm {

// Why: a collective transport's listeners (NCCL's bootstrap sockets; the
// TCP mesh proves each connection itself, tcp_mesh.h) take the first connection that arrives, from
// anyone who can reach the port. Knowing the rendezvous store's secret lets a
// rank learn the addresses, but nothing proves that what connected to them is
// a rank. So, once a group is connected and before any tensor moves, every
// rank proves to every other rank, over the group's own new connections, that
// it knows the group secret:
//
//   round 1: every rank gathers every rank's fresh random nonce
//            (kProofNonceBytes each, from the kernel's CSPRNG);
//   round 2: rank r sends ProofTag(secret, group, world, r, all nonces), and
//            checks every peer p's tag against the one it computes for p.
//
// Each tag covers every rank's nonce, the verifier's own fresh one included,
// so a tag recorded from another attempt never verifies (challenges in both
// directions at once); it names the sender's rank, so a tag cannot be
// reflected back; and it names the group (the attempt's rendezvous prefix).
// What a peer does not send in time fails as the gather fails.
inline constexpr size_t kProofNonceBytes = 32;
inline constexpr size_t kProofTagBytes = 32;  // HMAC-SHA256.

// Moves bytes between the ranks like AllGather: `all` holds world parts of
// `part_bytes` (a multiple of 4); this rank's part is already in place at
// rank * part_bytes, and on OK every other part is filled from its rank.
using GatherBytes = std::function<absl::Status(char* all, size_t part_bytes)>;

// Runs the two rounds above through `gather`. PERMISSION_DENIED naming the
// first peer whose tag is wrong; the gather's own error when it fails;
// INVALID_ARGUMENT for rank/world out of range or a secret outside the worker
// secret's length bounds (wire/worker_secret.h). OK at once at world 1
// (no peer, no secret needed).
absl::Status ProveGroupSecret(int rank, int world, absl::string_view secret,
                              absl::string_view group, const GatherBytes& gather);

// The tag `rank` sends: HMAC-SHA256 keyed with `secret` over a
// length-prefixed encoding of a fixed label, `group`, `world`, `rank` and
// `nonces` (world * kProofNonceBytes bytes). Exposed for tests.
std::string ProofTag(absl::string_view secret, absl::string_view group, int world, int rank,
                     absl::string_view nonces);

}  // namespace pagoda::worker::comm

#endif  // PAGODA_WORKER_COMM_COLLECTIVE_PROOF_H_
