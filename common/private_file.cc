#include "common/private_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pagoda {

absl::StatusOr<int> OpenPrivateFile(const std::string& path, const std::string& what) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot open ", what, " '", path, "': ", strerror(errno)));
  }
  struct stat info;
  // Group read is allowed: Kubernetes mounts a Secret for a pod with an
  // fsGroup as root:<fsGroup> mode 0440, the group being the pod's own.
  if (fstat(fd, &info) != 0 || (info.st_mode & (S_IWGRP | S_IXGRP | S_IRWXO)) != 0) {
    const unsigned mode = static_cast<unsigned>(info.st_mode & 07777);
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        what, " '", path, "' is accessible to others or writable by its group (mode ",
        (mode >> 9) & 7, (mode >> 6) & 7, (mode >> 3) & 7, mode & 7,
        "); make it readable by its owner only: chmod 600 '", path, "'"));
  }
  return fd;
}

absl::StatusOr<std::string> ReadPrivateFile(const std::string& path, const std::string& what,
                                            size_t max_bytes) {
  absl::StatusOr<int> fd = OpenPrivateFile(path, what);
  if (!fd.ok()) return fd.status();
  std::string contents;
  char buffer[4096];
  while (true) {
    const ssize_t got = read(*fd, buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int error = errno;
      close(*fd);
      return absl::InvalidArgumentError(
          absl::StrCat("reading ", what, " '", path, "': ", strerror(error)));
    }
    if (got == 0) break;
    contents.append(buffer, static_cast<size_t>(got));
    if (contents.size() > max_bytes) {
      close(*fd);
      return absl::InvalidArgumentError(
          absl::StrCat(what, " '", path, "' is longer than ", max_bytes, " bytes"));
    }
  }
  close(*fd);
  return contents;
}

}  // namespace pagoda
