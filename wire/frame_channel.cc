#include "wire/frame_channel.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace pagoda {
namespace {

constexpr size_t kLengthBytes = 8;
constexpr size_t kFirstReadBytes = size_t{64} << 10;

// Waits until `fd` is ready for `events` or the wait must end. OK when ready.
absl::Status WaitReady(int fd, short events, absl::Time deadline, const KeepWaiting& keep_waiting,
                       absl::Duration poll_period) {
  for (;;) {
    if (keep_waiting && !keep_waiting()) return absl::CancelledError("channel wait cancelled");
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return absl::DeadlineExceededError("channel deadline passed");
    const int64_t wait_ms =
        std::max<int64_t>(1, absl::ToInt64Milliseconds(std::min(left, poll_period)));
    pollfd ready = {fd, events, 0};
    const int polled = poll(&ready, 1, static_cast<int>(wait_ms));
    if (polled > 0) return absl::OkStatus();  // Ready, or an error the I/O call reports.
    if (polled < 0 && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("poll: ", strerror(errno)));
    }
  }
}

absl::Status SendAll(int fd, const char* data, size_t size, absl::Time deadline,
                     const KeepWaiting& keep_waiting, absl::Duration poll_period) {
  while (size > 0) {
    // MSG_DONTWAIT: a full socket buffer returns EAGAIN instead of blocking
    // past the deadline; MSG_NOSIGNAL: a closed peer is an error, not SIGPIPE.
    const ssize_t sent = send(fd, data, size, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent > 0) {
      data += sent;
      size -= static_cast<size_t>(sent);
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (absl::Status ready = WaitReady(fd, POLLOUT, deadline, keep_waiting, poll_period);
          !ready.ok()) {
        return ready;
      }
      continue;
    }
    return absl::UnavailableError(absl::StrCat("channel send: ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status ReceiveAll(int fd, char* data, size_t size, absl::Time deadline,
                        const KeepWaiting& keep_waiting, absl::Duration poll_period) {
  while (size > 0) {
    const ssize_t got = recv(fd, data, size, MSG_DONTWAIT);
    if (got > 0) {
      data += got;
      size -= static_cast<size_t>(got);
      continue;
    }
    if (got == 0) return absl::UnavailableError("channel closed by the peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (absl::Status ready = WaitReady(fd, POLLIN, deadline, keep_waiting, poll_period);
          !ready.ok()) {
        return ready;
      }
      continue;
    }
    return absl::UnavailableError(absl::StrCat("channel recv: ", strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteFrame(int fd, absl::string_view payload, absl::Time deadline,
                        const KeepWaiting& keep_waiting, absl::Duration poll_period) {
  char header[kLengthBytes];
  uint64_t length = payload.size();
  for (size_t i = 0; i < kLengthBytes; ++i, length >>= 8) header[i] = static_cast<char>(length);
  if (absl::Status sent = SendAll(fd, header, kLengthBytes, deadline, keep_waiting, poll_period);
      !sent.ok()) {
    return sent;
  }
  return SendAll(fd, payload.data(), payload.size(), deadline, keep_waiting, poll_period);
}

absl::Status ReadFrame(int fd, absl::Time deadline, uint64_t max_bytes, std::string* payload,
                       const KeepWaiting& keep_waiting, absl::Duration poll_period) {
  unsigned char header[kLengthBytes];
  if (absl::Status got = ReceiveAll(fd, reinterpret_cast<char*>(header), kLengthBytes, deadline,
                                    keep_waiting, poll_period);
      !got.ok()) {
    return got;
  }
  uint64_t length = 0;
  for (size_t i = kLengthBytes; i-- > 0;) length = (length << 8) | header[i];
  if (length > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("channel frame of ", length, " bytes exceeds the bound of ", max_bytes));
  }
  // The buffer grows with the bytes that arrive (doubling from 64 KiB), so a
  // length prefix alone, from a peer that dies or does not speak this
  // protocol, costs no memory.
  payload->clear();
  while (payload->size() < length) {
    const size_t have = payload->size();
    const size_t next =
        static_cast<size_t>(std::min<uint64_t>(length, have + std::max(kFirstReadBytes, have)));
    payload->resize(next);
    if (absl::Status got = ReceiveAll(fd, payload->data() + have, next - have, deadline,
                                      keep_waiting, poll_period);
        !got.ok()) {
      return got;
    }
  }
  return absl::OkStatus();
}

}  // namespace pagoda
