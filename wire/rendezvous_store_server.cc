#include "wire/rendezvous_store_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "wire/rendezvous_protocol.h"
#include "wire/worker_secret.h"

namespace pagoda::wire {

using rendezvous::Reply;

namespace {
constexpr std::chrono::milliseconds kHelloTimeout{2000};
}  // namespace

struct RendezvousStoreServer::Connection {
  int fd = -1;
  std::atomic<bool> done{false};
  std::thread thread;
};

namespace {

absl::StatusOr<int> BindAndListen(const std::string& host, int port, int* bound_port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous store: host \"", host, "\" is not an IPv4 address"));
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", strerror(errno)));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(fd, 64) != 0) {
    absl::Status error = absl::UnavailableError(absl::StrCat(
        "rendezvous store: cannot listen on ", host, ":", port, ": ", strerror(errno)));
    close(fd);
    return error;
  }
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  *bound_port = ntohs(address.sin_port);
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RendezvousStoreServer>> RendezvousStoreServer::Start(
    const Options& options) {
  if (options.secret.size() < kMinWorkerSecretBytes ||
      options.secret.size() > kMaxWorkerSecretBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous store: secret must be ", kMinWorkerSecretBytes, " to ",
                     kMaxWorkerSecretBytes, " bytes, got ", options.secret.size()));
  }
  if (options.max_connections < 1) {
    return absl::InvalidArgumentError("rendezvous store: max_connections must be positive");
  }
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous store: port ", options.port, " outside [0, 65535]"));
  }
  int port = 0;
  absl::StatusOr<int> fd = BindAndListen(options.host, options.port, &port);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<RendezvousStoreServer> server(new RendezvousStoreServer(options, *fd, port));
  server->accept_thread_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

RendezvousStoreServer::RendezvousStoreServer(const Options& options, int listen_fd, int port)
    : options_(options), listen_fd_(listen_fd), port_(port) {}

RendezvousStoreServer::~RendezvousStoreServer() {
  stopping_ = true;
  {
    // Wakes every kWait in progress: their condition reads stopping_.
    absl::MutexLock lock(&store_mu_);
  }
  shutdown(listen_fd_, SHUT_RDWR);
  if (accept_thread_.joinable()) accept_thread_.join();
  close(listen_fd_);
  absl::MutexLock lock(&connections_mu_);
  for (auto& connection : connections_) shutdown(connection->fd, SHUT_RDWR);
  for (auto& connection : connections_) {
    connection->thread.join();
    close(connection->fd);
  }
  connections_.clear();
}

void RendezvousStoreServer::ReapFinished() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if ((*it)->done) {
      (*it)->thread.join();
      close((*it)->fd);
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void RendezvousStoreServer::AcceptLoop() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    if (stopping_) {
      close(fd);
      break;
    }
    absl::MutexLock lock(&connections_mu_);
    ReapFinished();
    if (static_cast<int>(connections_.size()) >= options_.max_connections) {
      // Say why before closing; a fresh socket's buffer takes 5 bytes at once.
      std::string full = rendezvous::EncodeResponse(Reply::kStoreFull, "");
      send(fd, full.data(), full.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ++rejected_;
      close(fd);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto connection = std::make_unique<Connection>();
    connection->fd = fd;
    Connection* raw = connection.get();
    connections_.push_back(std::move(connection));
    raw->thread = std::thread([this, raw] {
      const bool violated = ServeUntilEnd(raw->fd);
      // The slot is free (reapable) before the peer sees the close, and a
      // violation is counted only after both: whoever watches the count
      // and then connects finds the slot given back.
      raw->done = true;
      shutdown(raw->fd, SHUT_RDWR);
      if (violated) ++rejected_;
    });
  }
}

void RendezvousStoreServer::ServeConnection(int fd) {
  if (ServeUntilEnd(fd)) ++rejected_;
}

bool RendezvousStoreServer::ServeUntilEnd(int fd) {
  bool authenticated = false;
  while (!stopping_) {
    // An unauthenticated connection gets little time, so idle hostile
    // connections cannot hold the slots for long.
    auto deadline =
        std::chrono::steady_clock::now() +
        (authenticated ? options_.idle_timeout : std::min(options_.idle_timeout, kHelloTimeout));
    unsigned char header[rendezvous::kRequestHeaderBytes];
    if (!rendezvous::ReadAll(fd, header, sizeof(header), deadline).ok()) return false;
    absl::StatusOr<rendezvous::RequestHeader> decoded = rendezvous::DecodeRequestHeader(header);
    if (!decoded.ok()) break;
    std::string key(decoded->key_bytes, '\0');
    std::string value(decoded->value_bytes, '\0');
    if (!rendezvous::ReadAll(fd, key.data(), key.size(), deadline).ok() ||
        !rendezvous::ReadAll(fd, value.data(), value.size(), deadline).ok()) {
      return false;
    }
    std::string reply;
    if (!authenticated) {
      if (decoded->op != rendezvous::Op::kHello || !key.empty() ||
          !ConstantTimeEquals(options_.secret, value)) {
        rendezvous::WriteAll(fd, rendezvous::EncodeResponse(Reply::kUnauthenticated, "").data(),
                             rendezvous::kResponseHeaderBytes, deadline)
            .IgnoreError();
        break;
      }
      authenticated = true;
      reply = rendezvous::EncodeResponse(Reply::kOk, "");
    } else if (decoded->op == rendezvous::Op::kHello || key.empty() ||
               !rendezvous::ValidateKey(key).ok() ||
               (decoded->op == rendezvous::Op::kWait &&
                !rendezvous::DecodeWaitMillis(value).ok())) {
      break;
    } else {
      reply = Apply(static_cast<int>(decoded->op), key, std::move(value));
    }
    if (!rendezvous::WriteAll(fd, reply.data(), reply.size(), deadline).ok()) return false;
  }
  // Only a violation leaves the loop with the server still running.
  return !stopping_;
}

std::string RendezvousStoreServer::WaitFor(const std::string& key, uint32_t millis) {
  absl::MutexLock lock(&store_mu_);
  auto settled = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(store_mu_) {
    return stopping_.load() || store_.count(key) > 0;
  };
  store_mu_.AwaitWithTimeout(absl::Condition(&settled), absl::Milliseconds(millis));
  auto it = store_.find(key);
  if (it == store_.end()) return rendezvous::EncodeResponse(Reply::kNotFound, "");
  return rendezvous::EncodeResponse(Reply::kOk, it->second);
}

std::string RendezvousStoreServer::Apply(int op, const std::string& key, std::string value) {
  if (op == static_cast<int>(rendezvous::Op::kWait)) {
    return WaitFor(key, rendezvous::DecodeWaitMillis(value).value_or(0));
  }
  absl::MutexLock lock(&store_mu_);
  if (op == static_cast<int>(rendezvous::Op::kGet)) {
    auto it = store_.find(key);
    if (it == store_.end()) return rendezvous::EncodeResponse(Reply::kNotFound, "");
    return rendezvous::EncodeResponse(Reply::kOk, it->second);
  }
  auto it = store_.find(key);
  size_t old_bytes = it == store_.end() ? 0 : key.size() + it->second.size();
  size_t new_total = store_bytes_ - old_bytes + key.size() + value.size();
  if ((it == store_.end() && store_.size() >= kMaxKeys) || new_total > kMaxStoreBytes) {
    return rendezvous::EncodeResponse(Reply::kStoreFull, "");
  }
  store_bytes_ = new_total;
  store_[key] = std::move(value);
  return rendezvous::EncodeResponse(Reply::kOk, "");
}

}  // namespace pagoda::wire
