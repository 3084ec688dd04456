#include "worker/comm/collective_proof.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "wire/limits.h"
#include "wire/worker_secret.h"

namespace pagoda::worker::comm {
namespace {

// Names this use of the secret, so a tag can never be mistaken for any other
// message keyed with the same secret.
constexpr absl::string_view kProofLabel = "pagoda collective proof v1";

void AppendLengthPrefixed(std::string* out, absl::string_view field) {
  const uint64_t size = field.size();
  for (int shift = 0; shift < 64; shift += 8) out->push_back(static_cast<char>(size >> shift));
  out->append(field.data(), field.size());
}

// One round: this rank's `part` in, every rank's part out.
absl::Status GatherParts(int rank, int world, const std::string& part, const GatherBytes& gather,
                         std::string* all) {
  all->assign(part.size() * static_cast<size_t>(world), '\0');
  all->replace(part.size() * static_cast<size_t>(rank), part.size(), part);
  return gather(all->data(), part.size());
}

}  // namespace

std::string ProofTag(absl::string_view secret, absl::string_view group, int world, int rank,
                     absl::string_view nonces) {
  std::string message;
  AppendLengthPrefixed(&message, kProofLabel);
  AppendLengthPrefixed(&message, group);
  AppendLengthPrefixed(&message, absl::StrCat(world, "/", rank));
  AppendLengthPrefixed(&message, nonces);
  unsigned char tag[EVP_MAX_MD_SIZE];
  unsigned int tag_bytes = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), tag, &tag_bytes);
  return std::string(reinterpret_cast<const char*>(tag), tag_bytes);
}

absl::Status ProveGroupSecret(int rank, int world, absl::string_view secret,
                              absl::string_view group, const GatherBytes& gather) {
  if (world < 1 || world > wire::kMaxWorldSize || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("group proof: rank ", rank, " of world size ", world));
  }
  if (world == 1) return absl::OkStatus();  // No peer to convince, and no secret needed.
  if (secret.size() < kMinWorkerSecretBytes || secret.size() > kMaxWorkerSecretBytes) {
    return absl::InvalidArgumentError(absl::StrCat("group proof: the secret must be ",
                                                   kMinWorkerSecretBytes, " to ",
                                                   kMaxWorkerSecretBytes, " bytes"));
  }
  std::string nonce(kProofNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), kProofNonceBytes) != 1) {
    return absl::InternalError("group proof: no random bytes for a nonce");
  }
  std::string nonces;
  if (absl::Status s = GatherParts(rank, world, nonce, gather, &nonces); !s.ok()) return s;
  std::string tags;
  const std::string mine = ProofTag(secret, group, world, rank, nonces);
  if (absl::Status s = GatherParts(rank, world, mine, gather, &tags); !s.ok()) return s;
  for (int peer = 0; peer < world; ++peer) {
    if (peer == rank) continue;
    const std::string expected = ProofTag(secret, group, world, peer, nonces);
    if (CRYPTO_memcmp(expected.data(), tags.data() + kProofTagBytes * peer, kProofTagBytes) != 0) {
      return absl::PermissionDeniedError(absl::StrCat(
          "rank ", peer, "'s connection to rank ", rank, " did not prove the group secret"));
    }
  }
  return absl::OkStatus();
}

}  // namespace pagoda::worker::comm
