// The rendezvous store the server hosts for a tensor-parallel group's ranks
// (wire/rendezvous_store_server.h), over a real loopback connection: any
// local process can reach its port, so every byte it reads is hostile until
// the hello with the secret. Input: the bytes a client sends on one
// connection; the harness then half-closes, reads until the server closes,
// and checks that every reply is well-formed. The secret is kSecret (the
// seeds carry it, so mutations reach the authenticated requests). One store
// serves every input, so keys set by earlier inputs stay.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "tests/fuzz/fuzz_support.h"
#include "wire/rendezvous_protocol.h"
#include "wire/rendezvous_store_server.h"

namespace {

using pagoda::fuzz::Check;
namespace rendezvous = pagoda::wire::rendezvous;

constexpr char kSecret[] = "pagoda-fuzz-secret-0123456789";
constexpr size_t kMaxInputBytes = 64 << 10;
constexpr int kReplyTimeoutMs = 10000;

int StorePort() {
  static pagoda::wire::RendezvousStoreServer* server = [] {
    pagoda::wire::RendezvousStoreServer::Options options;
    options.secret = kSecret;
    options.idle_timeout = std::chrono::milliseconds(5000);
    auto started = pagoda::wire::RendezvousStoreServer::Start(options);
    Check(started.ok(), "the store starts");
    return started->release();
  }();
  return server->port();
}

void CheckErrno(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "%s: %s\n", what, std::strerror(errno));
    Check(false, what);
  }
}

// A loopback connection from a source address that cycles through
// 127.0.0.0/8: each closed connection leaves a TIME_WAIT entry for 60 s on
// its (source, port) pair, and one source address has only ~28k ephemeral
// ports, which a fast run uses up in half a minute.
int Connect(int port) {
  static uint32_t next_source = 0;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CheckErrno(fd >= 0, "socket");
  int one = 1;
  setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
  sockaddr_in source{};
  source.sin_family = AF_INET;
  source.sin_addr.s_addr = htonl((127u << 24) | (1u + next_source++ % 0xFFFFFEu));
  CheckErrno(bind(fd, reinterpret_cast<sockaddr*>(&source), sizeof(source)) == 0, "bind");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    // libFuzzer's timers interrupt connect too (EINTR): the handshake goes on
    // in the kernel, and the socket turns writable when it ends.
    CheckErrno(errno == EINTR || errno == EINPROGRESS, "connect");
    pollfd writable{fd, POLLOUT, 0};
    int polled;
    while ((polled = poll(&writable, 1, kReplyTimeoutMs)) < 0) {
      CheckErrno(errno == EINTR, "poll connect");
    }
    Check(polled > 0, "the store accepts within the timeout");
    int error = 0;
    socklen_t length = sizeof(error);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
    errno = error;
    CheckErrno(error == 0, "connect (completed)");
  }
  // Closing with a reset leaves no TIME_WAIT behind when the store has not
  // closed first.
  linger reset{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  return fd;
}

// Everything the server sends until it closes (or the timeout passes).
std::string ReadReplies(int fd) {
  std::string replies;
  char buffer[4096];
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kReplyTimeoutMs);
  for (;;) {
    pollfd ready{fd, POLLIN, 0};
    // libFuzzer's timers interrupt poll (EINTR): wait again until the deadline.
    const int polled = poll(&ready, 1, 100);
    if (polled < 0 && errno != EINTR) Check(false, "poll");
    if (polled <= 0) {
      Check(std::chrono::steady_clock::now() < deadline,
            "the store neither replies nor closes a half-closed connection");
      continue;
    }
    const ssize_t got = recv(fd, buffer, sizeof(buffer), 0);
    if (got <= 0) return replies;  // Closed (or reset after a violation).
    replies.append(buffer, static_cast<size_t>(got));
  }
}

// Every reply is status u8 | value_len u32 BE | value, with a known status.
void CheckReplies(const std::string& replies) {
  size_t at = 0;
  while (at < replies.size()) {
    Check(replies.size() - at >= rendezvous::kResponseHeaderBytes, "whole reply header");
    const auto* header = reinterpret_cast<const unsigned char*>(replies.data() + at);
    Check(header[0] <= static_cast<unsigned char>(rendezvous::Reply::kStoreFull), "known reply");
    const size_t value = (size_t{header[1]} << 24) | (size_t{header[2]} << 16) |
                         (size_t{header[3]} << 8) | header[4];
    Check(value <= rendezvous::kMaxValueBytes, "reply value bounded");
    at += rendezvous::kResponseHeaderBytes;
    Check(replies.size() - at >= value, "whole reply value");
    at += value;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size = std::min(size, kMaxInputBytes);
  const int fd = Connect(StorePort());
  for (size_t sent = 0; sent < size;) {
    const ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // The store closed on a violation: what it read is what counts.
    sent += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  CheckReplies(ReadReplies(fd));
  close(fd);
  return 0;
}
