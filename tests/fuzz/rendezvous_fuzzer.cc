// The rendezvous store the server hosts for a tensor-parallel group's ranks
// (wire/rendezvous_store_server.h): any local process can reach its port, so
// every byte it reads is hostile until the hello with the secret. Input:
// the bytes a client sends on one connection; the harness then half-closes,
// reads until the server closes, and checks that every reply is
// well-formed. The connection is a socketpair served by the store's own
// connection loop (ServeConnection, what each accepted TCP connection runs)
// on this thread, while a helper thread sends the input and reads the
// replies: a new TCP connection per input spent most of the time in the
// kernel. The secret is kSecret (the seeds carry it, so mutations reach the
// authenticated requests). One store serves every input, so keys set by
// earlier inputs stay.
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
#include <thread>

#include "tests/fuzz/fuzz_support.h"
#include "wire/rendezvous_protocol.h"
#include "wire/rendezvous_store_server.h"

namespace {

using pagoda::fuzz::Check;
namespace rendezvous = pagoda::wire::rendezvous;

constexpr char kSecret[] = "pagoda-fuzz-secret-0123456789";
constexpr size_t kMaxInputBytes = 64 << 10;
constexpr int kReplyTimeoutMs = 10000;

pagoda::wire::RendezvousStoreServer& Store() {
  static pagoda::wire::RendezvousStoreServer* server = [] {
    pagoda::wire::RendezvousStoreServer::Options options;
    options.secret = kSecret;
    options.idle_timeout = std::chrono::milliseconds(5000);
    auto started = pagoda::wire::RendezvousStoreServer::Start(options);
    Check(started.ok(), "the store starts");
    return started->release();
  }();
  return *server;
}

void CheckErrno(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "%s: %s\n", what, std::strerror(errno));
    Check(false, what);
  }
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

// The client's side: the input, a half-close, then every reply.
std::string Client(int fd, const uint8_t* data, size_t size) {
  for (size_t sent = 0; sent < size;) {
    const ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // The store closed on a violation: what it read is what counts.
    sent += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  return ReadReplies(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size = std::min(size, kMaxInputBytes);
  pagoda::wire::RendezvousStoreServer& store = Store();
  int fds[2];
  CheckErrno(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0, "socketpair");
  std::string replies;
  std::thread client([&] { replies = Client(fds[0], data, size); });
  store.ServeConnection(fds[1]);
  // As the store's accept loop does once a connection is served.
  shutdown(fds[1], SHUT_RDWR);
  client.join();
  close(fds[0]);
  close(fds[1]);
  CheckReplies(replies);
  return 0;
}
