#ifndef PAGODA_COMMON_PRIVATE_FILE_H_
#define PAGODA_COMMON_PRIVATE_FILE_H_

// Opening the files that hold credentials (the worker secret, TLS private
// keys), refusing any whose mode lets other users read them.

#include <string>

#include "absl/status/statusor.h"

namespace pagoda {

// The rule for a file that holds a credential (the worker secret, a TLS
// private key): others may not access it, and its group may at most read it.
// A file others may read is a credential every local user holds too, so it
// is refused at start-up rather than used. Group read is the one exception
// because Kubernetes needs it: a Secret mounted in a pod with an fsGroup
// arrives as root:<fsGroup>, mode 0440 whatever its defaultMode, and the
// process reads it through that group, which is the pod's own.

// Opens `path` (after symlinks, as Kubernetes mounts Secrets) read-only and
// close-on-exec; returns the descriptor, which the caller closes.
// INVALID_ARGUMENT naming `what` (e.g. "worker secret file") if it cannot be
// opened, or if its mode grants others any access or its group more than
// read, saying to chmod 600 it.
absl::StatusOr<int> OpenPrivateFile(const std::string& path, const std::string& what);

// The whole of such a file (OpenPrivateFile's checks), at most `max_bytes`
// long: INVALID_ARGUMENT past that or on a read error.
absl::StatusOr<std::string> ReadPrivateFile(const std::string& path, const std::string& what,
                                            size_t max_bytes);

}  // namespace pagoda

#endif  // PAGODA_COMMON_PRIVATE_FILE_H_
