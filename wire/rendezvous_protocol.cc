#include "wire/rendezvous_protocol.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pagoda::wire::rendezvous {
namespace {

void PutU16(std::string& out, uint16_t v) {
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v & 0xff));
}
void PutU32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((v >> shift) & 0xff));
}
uint32_t GetU32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

std::string EncodeRequest(const Request& request) {
  std::string out(kMagic, sizeof(kMagic));
  out.push_back(static_cast<char>(request.op));
  PutU16(out, static_cast<uint16_t>(request.key.size()));
  PutU32(out, static_cast<uint32_t>(request.value.size()));
  out += request.key;
  out += request.value;
  return out;
}

std::string EncodeResponse(Reply reply, const std::string& value) {
  std::string out;
  out.push_back(static_cast<char>(reply));
  PutU32(out, static_cast<uint32_t>(value.size()));
  out += value;
  return out;
}

std::string EncodeWaitMillis(uint32_t millis) {
  std::string out;
  PutU32(out, std::min(millis, kMaxWaitMillis));
  return out;
}

absl::StatusOr<uint32_t> DecodeWaitMillis(const std::string& value) {
  if (value.size() != kWaitValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous store: a wait of ", value.size(),
                                                   " bytes, not ", kWaitValueBytes));
  }
  return std::min(GetU32(reinterpret_cast<const unsigned char*>(value.data())), kMaxWaitMillis);
}

absl::StatusOr<RequestHeader> DecodeRequestHeader(const unsigned char* header) {
  if (std::memcmp(header, kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError("rendezvous store: bad magic");
  }
  uint8_t op = header[4];
  if (op < static_cast<uint8_t>(Op::kHello) || op > static_cast<uint8_t>(Op::kWait)) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous store: unknown op ", op));
  }
  size_t key_bytes = (size_t{header[5]} << 8) | header[6];
  size_t value_bytes = GetU32(header + 7);
  if (key_bytes > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous store: key of ", key_bytes, " bytes over ", kMaxKeyBytes));
  }
  if (value_bytes > kMaxValueBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous store: value of ", value_bytes, " bytes over ", kMaxValueBytes));
  }
  return RequestHeader{static_cast<Op>(op), key_bytes, value_bytes};
}

absl::Status ValidateKey(const std::string& key) {
  for (unsigned char c : key) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError("rendezvous store: key byte outside printable ASCII");
    }
  }
  return absl::OkStatus();
}

// Waits until `fd` is ready for `events` or the deadline passes.
absl::Status WaitReady(int fd, short events, Deadline deadline) {
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return absl::DeadlineExceededError("rendezvous store: I/O timed out");
    pollfd p{fd, events, 0};
    int rc = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (rc > 0) return absl::OkStatus();
    if (rc < 0 && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("rendezvous store: poll: ", strerror(errno)));
    }
  }
}

absl::Status WriteAll(int fd, const void* data, size_t size, Deadline deadline) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    if (absl::Status ready = WaitReady(fd, POLLOUT, deadline); !ready.ok()) return ready;
    ssize_t n = send(fd, p, size, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return absl::UnavailableError(absl::StrCat("rendezvous store: send: ", strerror(errno)));
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status ReadAll(int fd, void* data, size_t size, Deadline deadline) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    if (absl::Status ready = WaitReady(fd, POLLIN, deadline); !ready.ok()) return ready;
    ssize_t n = recv(fd, p, size, 0);
    if (n == 0) return absl::UnavailableError("rendezvous store: connection closed");
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return absl::UnavailableError(absl::StrCat("rendezvous store: recv: ", strerror(errno)));
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace pagoda::wire::rendezvous
