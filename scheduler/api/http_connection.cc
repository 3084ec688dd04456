#include "scheduler/api/http_connection.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <filesystem>
#include <optional>
#include <utility>
#include <vector>
#include <system_error>

namespace pagoda::scheduler {
namespace {

// The numeric host and port of `address`; port -1 if not an IP address.
std::pair<std::string, int> HostAndPort(const sockaddr_storage& address, socklen_t length) {
  if (address.ss_family != AF_INET && address.ss_family != AF_INET6) return {"", -1};
  char host[NI_MAXHOST];
  char port[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&address), length, host, sizeof(host), port,
                  sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return {"", -1};
  }
  return {host, std::atoi(port)};
}

// The peer's numeric host and port if `fd` is a connected socket whose local
// port is `local_port`.
std::optional<std::pair<std::string, int>> PeerOnPort(int fd, int local_port) {
  struct stat info;
  if (fstat(fd, &info) != 0 || !S_ISSOCK(info.st_mode)) return std::nullopt;
  sockaddr_storage local{};
  socklen_t local_length = sizeof(local);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_length) != 0) {
    return std::nullopt;
  }
  if (HostAndPort(local, local_length).second != local_port) return std::nullopt;
  sockaddr_storage peer{};
  socklen_t peer_length = sizeof(peer);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_length) != 0) {
    return std::nullopt;  // The listening socket, or not connected.
  }
  return HostAndPort(peer, peer_length);
}

// This process's open descriptors.
std::vector<int> OpenDescriptors() {
  std::vector<int> fds;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", error)) {
    const std::string name = entry.path().filename().string();
    int fd = -1;
    if (std::from_chars(name.data(), name.data() + name.size(), fd).ec == std::errc()) {
      fds.push_back(fd);
    }
  }
  return fds;
}

}  // namespace

HttpConnection HttpConnection::Find(int local_port, const std::string& remote_addr,
                                    int remote_port) {
  for (int fd : OpenDescriptors()) {
    if (PeerOnPort(fd, local_port) == std::make_pair(remote_addr, remote_port)) {
      return HttpConnection(fd);
    }
  }
  return HttpConnection(-1);
}

std::vector<HttpConnection> HttpConnection::AllOnPort(int local_port) {
  std::vector<HttpConnection> connections;
  for (int fd : OpenDescriptors()) {
    if (PeerOnPort(fd, local_port).has_value()) connections.push_back(HttpConnection(fd));
  }
  return connections;
}

bool HttpConnection::PeerClosed() const {
  if (fd_ < 0) return false;
  pollfd poll_fd{fd_, POLLIN | POLLRDHUP, 0};
  if (poll(&poll_fd, 1, 0) <= 0) return false;
  if (poll_fd.revents & (POLLHUP | POLLERR | POLLRDHUP)) return true;
  char byte;
  const ssize_t peeked = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return peeked == 0 || (peeked < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

void HttpConnection::ShutDown() const {
  if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
}

}  // namespace pagoda::scheduler
