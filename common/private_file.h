#ifndef PAGODA_COMMON_PRIVATE_FILE_H_
#define PAGODA_COMMON_PRIVATE_FILE_H_

#include <string>

#include "absl/status/statusor.h"

namespace pagoda {

// The rule for a file that holds a credential (the worker secret, a TLS
// private key): its owner alone may access it. A file group or others may
// read is a credential other local users hold too, so it is refused at
// start-up rather than used.

// Opens `path` (after symlinks, as Kubernetes mounts Secrets) read-only and
// close-on-exec; returns the descriptor, which the caller closes.
// INVALID_ARGUMENT naming `what` (e.g. "worker secret file") if it cannot be
// opened, or if its mode grants group or others any access, saying to
// chmod 600 it.
absl::StatusOr<int> OpenPrivateFile(const std::string& path, const std::string& what);

// The whole of such a file (OpenPrivateFile's checks), at most `max_bytes`
// long: INVALID_ARGUMENT past that or on a read error.
absl::StatusOr<std::string> ReadPrivateFile(const std::string& path, const std::string& what,
                                            size_t max_bytes);

}  // namespace pagoda

#endif  // PAGODA_COMMON_PRIVATE_FILE_H_
