#ifndef PAGODA_WIRE_WORKER_SECRET_H_
#define PAGODA_WIRE_WORKER_SECRET_H_

// The shared secret between pagoda-server and its workers: its metadata key,
// bounds, generation and reading from an inherited pipe or a private file.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pagoda {

// The shared secret that authenticates the server to its workers: every
// pagoda.worker.v1.Worker call carries it in this metadata entry, and a
// worker refuses (UNAUTHENTICATED) any call without it.
inline constexpr char kWorkerSecretMetadataKey[] = "x-pagoda-worker-secret";
// Shorter secrets are refused: they could be guessed.
inline constexpr size_t kMinWorkerSecretBytes = 16;
// Longer ones are refused too: a secret is read whole into memory.
inline constexpr size_t kMaxWorkerSecretBytes = 4096;

// 32 random bytes from the kernel (getrandom), hex-encoded: a fresh secret for
// one launch of one worker.
absl::StatusOr<std::string> GenerateWorkerSecret();

// Reads a secret from `fd` until end of file and closes `fd`. Surrounding
// whitespace is dropped. INVALID_ARGUMENT if it is shorter than
// kMinWorkerSecretBytes or longer than kMaxWorkerSecretBytes.
absl::StatusOr<std::string> ReadWorkerSecretFromFd(int fd);

// Same, from a file (a mounted Kubernetes Secret, for connected workers).
// INVALID_ARGUMENT, saying to chmod 600 it, if the file (after symlinks, as
// Kubernetes mounts them) grants others any access or its group more than
// read (common/private_file.h): a secret other local users can read is none.
absl::StatusOr<std::string> ReadWorkerSecretFile(const std::string& path);

// Compares in time independent of where the first difference is, so a caller
// cannot learn the secret byte by byte from response times.
bool ConstantTimeEquals(absl::string_view expected, absl::string_view given);

}  // namespace pagoda

#endif  // PAGODA_WIRE_WORKER_SECRET_H_
