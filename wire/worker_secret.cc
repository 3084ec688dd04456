#include "wire/worker_secret.h"

#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/private_file.h"

namespace pagoda {
namespace {

constexpr size_t kGeneratedSecretBytes = 32;

absl::StatusOr<std::string> CheckSecret(absl::string_view raw, absl::string_view source) {
  absl::string_view secret = absl::StripAsciiWhitespace(raw);
  if (secret.size() < kMinWorkerSecretBytes || secret.size() > kMaxWorkerSecretBytes) {
    return absl::InvalidArgumentError(absl::StrCat("worker secret from ", source, ": must be ",
                                                   kMinWorkerSecretBytes, " to ",
                                                   kMaxWorkerSecretBytes, " bytes"));
  }
  return std::string(secret);
}

}  // namespace

absl::StatusOr<std::string> GenerateWorkerSecret() {
  char bytes[kGeneratedSecretBytes];
  size_t filled = 0;
  while (filled < sizeof(bytes)) {
    const ssize_t got = getrandom(bytes + filled, sizeof(bytes) - filled, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return absl::InternalError(absl::StrCat("getrandom: ", strerror(errno)));
    filled += static_cast<size_t>(got);
  }
  return absl::BytesToHexString(absl::string_view(bytes, sizeof(bytes)));
}

absl::StatusOr<std::string> ReadWorkerSecretFromFd(int fd) {
  std::string raw;
  char buffer[512];
  while (raw.size() <= kMaxWorkerSecretBytes + 64) {
    const ssize_t got = read(fd, buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int error = errno;
      close(fd);
      return absl::InvalidArgumentError(
          absl::StrCat("reading the worker secret from fd ", fd, ": ", strerror(error)));
    }
    if (got == 0) break;
    raw.append(buffer, static_cast<size_t>(got));
  }
  close(fd);
  return CheckSecret(raw, absl::StrCat("fd ", fd));
}

absl::StatusOr<std::string> ReadWorkerSecretFile(const std::string& path) {
  absl::StatusOr<int> fd = OpenPrivateFile(path, "worker secret file");
  if (!fd.ok()) return fd.status();
  absl::StatusOr<std::string> secret = ReadWorkerSecretFromFd(*fd);
  if (!secret.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", secret.status().message()));
  }
  return secret;
}

bool ConstantTimeEquals(absl::string_view expected, absl::string_view given) {
  // The length of the secret is no secret; its bytes are.
  if (expected.size() != given.size()) return false;
  unsigned char difference = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    difference |= static_cast<unsigned char>(expected[i] ^ given[i]);
  }
  return difference == 0;
}

}  // namespace pagoda
