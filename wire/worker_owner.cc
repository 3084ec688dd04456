#include "wire/worker_owner.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace pagoda::wire {

absl::StatusOr<std::string> GenerateWorkerOwnerId() {
  uint8_t bytes[kWorkerOwnerIdLength / 2];
  if (getrandom(bytes, sizeof(bytes), 0) != static_cast<ssize_t>(sizeof(bytes))) {
    return absl::InternalError(absl::StrCat("getrandom: ", std::strerror(errno)));
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

absl::Status ValidateWorkerOwnerId(absl::string_view id) {
  bool hex = id.size() == kWorkerOwnerIdLength;
  for (char c : id) hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  if (!hex) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a worker owner id is ", kWorkerOwnerIdLength, " lowercase hex digits"));
  }
  return absl::OkStatus();
}

}  // namespace pagoda::wire
