#include "worker/comm/rendezvous_store_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "wire/rendezvous_protocol.h"
#include "wire/worker_secret.h"

namespace pagoda::worker::comm {
namespace {

using Clock = std::chrono::steady_clock;

// Non-blocking connect bounded by the deadline, then back to blocking mode.
absl::StatusOr<int> ConnectTcp(const std::string& host, int port, Clock::time_point deadline) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (port <= 0 || port > 65535 || inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous store address ", host, ":", port, " is not IPv4 host:port"));
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", strerror(errno)));
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  if (rc != 0 && errno == EINPROGRESS) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd, POLLOUT, 0};
    rc = poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    int error = rc == 1 ? 0 : ETIMEDOUT;
    socklen_t length = sizeof(error);
    if (rc == 1) getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
    errno = error;
    rc = error == 0 ? 0 : -1;
  }
  if (rc != 0) {
    absl::Status status = absl::UnavailableError(absl::StrCat(
        "cannot connect to the rendezvous store at ", host, ":", port, ": ", strerror(errno)));
    close(fd);
    return status;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

uint32_t GetU32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

absl::StatusOr<std::unique_ptr<RendezvousStoreClient>> RendezvousStoreClient::Connect(
    const RendezvousAddress& address, std::chrono::milliseconds timeout) {
  if (address.prefix.size() + 1 > rendezvous::kMaxKeyBytes / 2 ||
      !rendezvous::ValidateKey(address.prefix).ok()) {
    return absl::InvalidArgumentError("rendezvous prefix must be short printable ASCII");
  }
  if (address.secret.size() < kMinWorkerSecretBytes ||
      address.secret.size() > kMaxWorkerSecretBytes) {
    return absl::InvalidArgumentError("rendezvous secret has the wrong length");
  }
  auto deadline = Clock::now() + timeout;
  absl::StatusOr<int> fd = ConnectTcp(address.host, address.port, deadline);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<RendezvousStoreClient> client(
      new RendezvousStoreClient(*fd, address.prefix, timeout));
  absl::MutexLock lock(&client->mu_);
  absl::StatusOr<std::string> hello =
      client->Call(static_cast<int>(rendezvous::Op::kHello), "", address.secret, deadline);
  if (!hello.ok()) return hello.status();
  return client;
}

RendezvousStoreClient::~RendezvousStoreClient() { close(fd_); }

absl::StatusOr<std::string> RendezvousStoreClient::Call(int op, const std::string& key,
                                                        const std::string& value,
                                                        Clock::time_point deadline) {
  rendezvous::Request request{static_cast<rendezvous::Op>(op), key, value};
  std::string frame = rendezvous::EncodeRequest(request);
  if (absl::Status s = rendezvous::WriteAll(fd_, frame.data(), frame.size(), deadline); !s.ok()) {
    return s;
  }
  unsigned char header[rendezvous::kResponseHeaderBytes];
  if (absl::Status s = rendezvous::ReadAll(fd_, header, sizeof(header), deadline); !s.ok()) {
    return s;
  }
  size_t value_bytes = GetU32(header + 1);
  if (value_bytes > rendezvous::kMaxValueBytes) {
    return absl::DataLossError("rendezvous store: oversized reply");
  }
  std::string reply(value_bytes, '\0');
  if (absl::Status s = rendezvous::ReadAll(fd_, reply.data(), reply.size(), deadline); !s.ok()) {
    return s;
  }
  switch (static_cast<rendezvous::Reply>(header[0])) {
    case rendezvous::Reply::kOk:
      return reply;
    case rendezvous::Reply::kNotFound:
      return absl::NotFoundError(absl::StrCat("rendezvous key ", key, " not set yet"));
    case rendezvous::Reply::kUnauthenticated:
      return absl::PermissionDeniedError("rendezvous store refused the secret");
    case rendezvous::Reply::kStoreFull:
      return absl::ResourceExhaustedError(op == static_cast<int>(rendezvous::Op::kHello)
                                              ? "rendezvous store serves too many connections"
                                              : "rendezvous store is full");
    default:
      return absl::DataLossError("rendezvous store: unknown reply");
  }
}

absl::Status RendezvousStoreClient::Set(const std::string& key, const std::string& value) {
  std::string full_key = absl::StrCat(prefix_, "/", key);
  if (full_key.size() > rendezvous::kMaxKeyBytes || !rendezvous::ValidateKey(full_key).ok()) {
    return absl::InvalidArgumentError(absl::StrCat("bad rendezvous key ", key));
  }
  if (value.size() > rendezvous::kMaxValueBytes) {
    return absl::InvalidArgumentError("rendezvous value too large");
  }
  absl::MutexLock lock(&mu_);
  return Call(static_cast<int>(rendezvous::Op::kSet), full_key, value, Clock::now() + timeout_)
      .status();
}

absl::StatusOr<std::string> RendezvousStoreClient::GetUntil(const std::string& key,
                                                            Clock::time_point deadline) {
  std::string full_key = absl::StrCat(prefix_, "/", key);
  if (full_key.size() > rendezvous::kMaxKeyBytes || !rendezvous::ValidateKey(full_key).ok()) {
    return absl::InvalidArgumentError(absl::StrCat("bad rendezvous key ", key));
  }
  while (true) {
    // At least one ask, even past the deadline: a key already set is found.
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    const auto wait = std::chrono::milliseconds(
        std::clamp<int64_t>(left.count(), 0, rendezvous::kMaxWaitMillis));
    absl::StatusOr<std::string> value;
    {
      absl::MutexLock lock(&mu_);
      // The store may hold its answer for the whole wait: the I/O deadline
      // allows for it.
      value = Call(static_cast<int>(rendezvous::Op::kWait), full_key,
                   rendezvous::EncodeWaitMillis(static_cast<uint32_t>(wait.count())),
                   Clock::now() + wait + std::chrono::milliseconds(rendezvous::kMaxWaitMillis));
    }
    if (!absl::IsNotFound(value.status())) return value;
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("rendezvous key ", key, " not set before the timeout"));
    }
  }
}

void RendezvousStoreClient::Interrupt() { shutdown(fd_, SHUT_RDWR); }

absl::StatusOr<std::string> RendezvousStoreClient::Get(const std::string& key) {
  return GetUntil(key, Clock::now() + timeout_);
}

}  // namespace pagoda::worker::comm
