#include "worker/http_page_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pagoda::worker {
namespace {

// A scrape is one short request: a client gets this long to send its head
// and take the answer, so a silent one holds the (single) server briefly.
constexpr absl::Duration kClientDeadline = absl::Seconds(2);
constexpr size_t kMaxRequestHeadBytes = 8 << 10;
constexpr int kBackoffMs = 100;

int RemainingMs(absl::Time deadline) {
  return static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now())));
}

// Waits for `events` on `fd` until `deadline`; false on timeout or error.
bool WaitFor(int fd, short events, absl::Time deadline) {
  pollfd ready = {fd, events, 0};
  int got;
  do {
    got = poll(&ready, 1, RemainingMs(deadline));
  } while (got < 0 && errno == EINTR);
  return got > 0 && (ready.revents & events) != 0;
}

// The request head (up to its blank line), or what came before the
// deadline, the peer's close or the size limit.
std::string ReadHead(int client, absl::Time deadline) {
  std::string head;
  char buffer[2048];
  while (head.size() <= kMaxRequestHeadBytes && !absl::StrContains(head, "\r\n\r\n") &&
         !absl::StrContains(head, "\n\n")) {
    if (!WaitFor(client, POLLIN, deadline)) break;
    const ssize_t got = recv(client, buffer, sizeof(buffer), 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    head.append(buffer, static_cast<size_t>(got));
  }
  return head;
}

void WriteAll(int client, absl::string_view data, absl::Time deadline) {
  while (!data.empty() && WaitFor(client, POLLOUT, deadline)) {
    const ssize_t sent = send(client, data.data(), data.size(), MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) return;
    data.remove_prefix(static_cast<size_t>(sent));
  }
}

// Ends the answer and reads what the client still sends until it closes or
// the deadline: closing with its bytes unread would reset the connection,
// and a reset may discard the answer before the client reads it.
void LingeringClose(int client, absl::Time deadline) {
  shutdown(client, SHUT_WR);
  char buffer[4096];
  while (WaitFor(client, POLLIN, deadline)) {
    const ssize_t got = recv(client, buffer, sizeof(buffer), 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
  }
}

std::string Response(absl::string_view status, absl::string_view content_type,
                     absl::string_view body, bool with_body) {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n",
                      with_body ? body : "");
}

// A listening socket on host:port, or why not.
absl::StatusOr<int> Listen(const std::string& host, int port) {
  const std::string where = absl::StrCat(host, ":", port);
  std::string name = host;
  if (name.size() > 2 && name.front() == '[' && name.back() == ']') {
    name = name.substr(1, name.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  if (const int error = getaddrinfo(name.c_str(), service.c_str(), &hints, &found); error != 0) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", where, ": ", gai_strerror(error)));
  }
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(found);
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", where, ": ", strerror(errno)));
  }
  // A restarted worker binds again at once, past the old one's TIME_WAITs.
  const int on = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  const bool bound = bind(fd, found->ai_addr, found->ai_addrlen) == 0 && listen(fd, 16) == 0;
  const int bind_errno = errno;
  freeaddrinfo(found);
  if (!bound) {
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", where, ": ",
                     bind_errno == EADDRINUSE ? "port in use" : strerror(bind_errno)));
  }
  return fd;
}

int LocalPort(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return 0;
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port);
  }
  return ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpPageServer>> HttpPageServer::Start(const std::string& host,
                                                                      int port, Page page) {
  absl::StatusOr<int> listen_fd = Listen(host, port);
  if (!listen_fd.ok()) return listen_fd.status();
  const int stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd < 0) {
    close(*listen_fd);
    return absl::UnavailableError(absl::StrCat("metrics: eventfd: ", strerror(errno)));
  }
  return std::unique_ptr<HttpPageServer>(
      new HttpPageServer(*listen_fd, stop_fd, LocalPort(*listen_fd), std::move(page)));
}

HttpPageServer::HttpPageServer(int listen_fd, int stop_fd, int port, Page page)
    : listen_fd_(listen_fd), stop_fd_(stop_fd), port_(port), page_(std::move(page)) {
  thread_ = std::thread([this] { Serve(); });
}

HttpPageServer::~HttpPageServer() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t ignored = write(stop_fd_, &one, sizeof(one));
  thread_.join();
  close(listen_fd_);
  close(stop_fd_);
}

void HttpPageServer::Serve() {
  while (true) {
    pollfd ready[2] = {{stop_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    if (poll(ready, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (ready[0].revents != 0) return;
    const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) {
      // Out of descriptors: the connection stays queued, so wait a moment
      // (or for the stop) rather than spin on it. Else the peer left.
      if (errno == EMFILE || errno == ENFILE) poll(ready, 1, kBackoffMs);
      continue;
    }
    Answer(client);
    close(client);
  }
}

void HttpPageServer::Answer(int client) {
  const absl::Time deadline = absl::Now() + kClientDeadline;
  const std::string head = ReadHead(client, deadline);
  const bool complete = absl::StrContains(head, "\r\n\r\n") || absl::StrContains(head, "\n\n");
  if (!complete) {
    if (head.size() > kMaxRequestHeadBytes) {
      WriteAll(client, Response("431 Request Header Fields Too Large", "text/plain", "", false),
               deadline);
      LingeringClose(client, deadline);
    }
    return;  // Silent, cut short or too slow: nothing worth an answer.
  }
  // "GET /metrics?x HTTP/1.1": the method and the path before any query.
  const std::vector<absl::string_view> request_line =
      absl::StrSplit(absl::string_view(head).substr(0, head.find_first_of("\r\n")), ' ');
  const absl::string_view method = request_line[0];
  const absl::string_view target = request_line.size() > 1 ? request_line[1] : "";
  const absl::string_view path = target.substr(0, target.find('?'));
  std::string response;
  if (path != page_.path) {
    response = Response("404 Not Found", "text/plain", "not found\n", method != "HEAD");
  } else if (method != "GET" && method != "HEAD") {
    response = Response("405 Method Not Allowed", "text/plain", "GET or HEAD only\n", true);
  } else {
    response = Response("200 OK", page_.content_type, page_.body(), method == "GET");
  }
  WriteAll(client, response, deadline);
  LingeringClose(client, deadline);
}

}  // namespace pagoda::worker
