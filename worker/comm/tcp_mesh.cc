#include "worker/comm/tcp_mesh.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "wire/rendezvous_protocol.h"
#include "worker/comm/collective_proof.h"

namespace pagoda::worker::comm {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kMagic[8] = {'P', 'G', 'D', 'M', 'E', 'S', 'H', '1'};
constexpr size_t kHelloBytes = sizeof(kMagic) + 4 + 4 + kProofNonceBytes + kProofTagBytes;
// How long the listening side waits for one connection's hello: a rank
// sends it the moment the nonce arrives.
constexpr std::chrono::milliseconds kHelloTimeout{2000};

int MillisUntil(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 60'000));
}

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

using wire::rendezvous::ReadAll;
using wire::rendezvous::WaitReady;
using wire::rendezvous::WriteAll;

absl::StatusOr<std::string> FreshNonce() {
  std::string nonce(kProofNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), kProofNonceBytes) != 1) {
    return absl::InternalError("no randomness for a handshake nonce");
  }
  return nonce;
}

std::string PairGroup(const std::string& group, int acceptor, int connector) {
  return absl::StrCat(group, "/pair/", acceptor, "/", connector);
}

void AppendU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

uint32_t ReadU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}

void NoDelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

absl::StatusOr<sockaddr_in> Ipv4(const std::string& host, int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (port < 0 || port > 65535 || inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("not an IPv4 address and port: ", host.substr(0, 64), ":", port));
  }
  return address;
}

// A listening socket on `host`, port picked by the OS, and "host:port".
absl::StatusOr<std::pair<int, std::string>> Listen(const std::string& host) {
  absl::StatusOr<sockaddr_in> address = Ipv4(host, 0);
  if (!address.ok()) return address.status();
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  socklen_t length = sizeof(*address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&*address), sizeof(*address)) != 0 ||
      listen(fd, SOMAXCONN) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&*address), &length) != 0) {
    absl::Status status = Errno(absl::StrCat("listen on ", host));
    close(fd);
    return status;
  }
  return std::make_pair(fd, absl::StrCat(host, ":", ntohs(address->sin_port)));
}

absl::StatusOr<int> ConnectTo(const std::string& host_port, Clock::time_point deadline) {
  const size_t colon = host_port.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(host_port.substr(colon + 1), &port)) {
    return absl::DataLossError("a peer posted a malformed address");
  }
  absl::StatusOr<sockaddr_in> address = Ipv4(host_port.substr(0, colon), port);
  if (!address.ok()) return absl::DataLossError(address.status().message());
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  absl::Status status;
  if (connect(fd, reinterpret_cast<sockaddr*>(&*address), sizeof(*address)) != 0) {
    status = errno == EINPROGRESS ? WaitReady(fd, POLLOUT, deadline) : Errno("connect");
    int error = 0;
    socklen_t length = sizeof(error);
    if (status.ok() && (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error)) {
      errno = error;
      status = Errno(absl::StrCat("connect to ", host_port));
    }
  }
  if (!status.ok()) {
    close(fd);
    return status;
  }
  NoDelay(fd);
  return fd;
}

// The connecting side of the handshake, with the listener of rank `acceptor`.
absl::Status ProveToListener(int fd, const TcpMeshOptions& options, int acceptor,
                             Clock::time_point deadline) {
  std::string nonces(kProofNonceBytes, '\0');
  if (absl::Status s = ReadAll(fd, nonces.data(), kProofNonceBytes, deadline); !s.ok()) return s;
  absl::StatusOr<std::string> nonce = FreshNonce();
  if (!nonce.ok()) return nonce.status();
  nonces += *nonce;
  const std::string group = PairGroup(options.group, acceptor, options.rank);
  std::string hello(kMagic, sizeof(kMagic));
  AppendU32(hello, static_cast<uint32_t>(options.rank));
  AppendU32(hello, static_cast<uint32_t>(acceptor));
  hello += *nonce;
  hello += ProofTag(options.secret, group, options.world_size, options.rank, nonces);
  if (absl::Status s = WriteAll(fd, hello.data(), hello.size(), deadline); !s.ok()) return s;
  char tag[kProofTagBytes];
  // The listener closes a connection whose hello fails: here, that means
  // this rank's proof (its secret differs from the listener's).
  if (absl::Status s = ReadAll(fd, tag, sizeof(tag), deadline); absl::IsUnavailable(s)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "rank ", acceptor, " refused this rank's proof of the group secret (", s.message(), ")"));
  } else if (!s.ok()) {
    return s;
  }
  const std::string expected =
      ProofTag(options.secret, group, options.world_size, acceptor, nonces);
  if (CRYPTO_memcmp(expected.data(), tag, kProofTagBytes) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("rank ", acceptor, "'s listener failed the group secret's proof"));
  }
  return absl::OkStatus();
}

// The listening side: handshakes with every connection that arrives, many at
// once, until each higher rank holds a proved connection in `fds`.
class Acceptor {
 public:
  Acceptor(const TcpMeshOptions& options, int listener, std::vector<int>& fds)
      : options_(options), listener_(listener), fds_(fds) {}
  ~Acceptor() {
    for (const Pending& p : pending_) close(p.fd);
  }

  absl::Status Run(Clock::time_point deadline) {
    while (Missing() > 0) {
      Clock::time_point wake = deadline;
      std::vector<pollfd> polled = {{listener_, POLLIN, 0}};
      for (const Pending& p : pending_) {
        polled.push_back({p.fd, POLLIN, 0});
        wake = std::min(wake, p.deadline);
      }
      const int rv = poll(polled.data(), polled.size(), MillisUntil(wake));
      if (rv < 0 && errno != EINTR) return Errno("poll");
      for (size_t i = polled.size(); i-- > 1;) {
        if (polled[i].revents != 0) Read(i - 1);
      }
      if (rv > 0 && polled[0].revents != 0) AcceptAll();
      DropExpired();
      if (Missing() > 0 && Clock::now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat("rank ", options_.rank, ": ", Missing(),
                                                        " higher rank(s) never connected"));
      }
    }
    return absl::OkStatus();
  }

 private:
  struct Pending {
    int fd;
    std::string nonce;
    std::string hello;  // Bytes read so far, up to kHelloBytes.
    Clock::time_point deadline;
  };

  int Missing() const {
    return static_cast<int>(std::count(fds_.begin() + options_.rank + 1, fds_.end(), -1));
  }

  void AcceptAll() {
    for (;;) {
      const int fd = accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or a connection that died in the backlog.
      absl::StatusOr<std::string> nonce = FreshNonce();
      // The nonce fits an empty socket buffer: a send that does not finish
      // at once is a broken connection.
      if (!nonce.ok() || send(fd, nonce->data(), nonce->size(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
                             static_cast<ssize_t>(nonce->size())) {
        close(fd);
        continue;
      }
      // Full: the oldest handshake goes (a rank's hello follows its nonce
      // within a round trip; only an intruder's waits that long).
      if (pending_.size() >= kMaxPendingHandshakes) Drop(0);
      NoDelay(fd);
      pending_.push_back({fd, *std::move(nonce), "", Clock::now() + kHelloTimeout});
    }
  }

  void Read(size_t index) {
    Pending& p = pending_[index];
    char buffer[kHelloBytes];
    const ssize_t rv = recv(p.fd, buffer, kHelloBytes - p.hello.size(), 0);
    if (rv < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (rv <= 0) return Drop(index);
    p.hello.append(buffer, static_cast<size_t>(rv));
    if (p.hello.size() < kHelloBytes) return;
    const int peer = Verified(p);
    if (peer < 0) return Drop(index);
    const std::string tag = ProofTag(
        options_.secret, PairGroup(options_.group, options_.rank, peer), options_.world_size,
        options_.rank, p.nonce + p.hello.substr(16, kProofNonceBytes));
    if (send(p.fd, tag.data(), tag.size(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
        static_cast<ssize_t>(tag.size())) {
      return Drop(index);
    }
    fds_[peer] = p.fd;
    pending_.erase(pending_.begin() + static_cast<ptrdiff_t>(index));
  }

  // The hello's sender when everything in it holds, else -1.
  int Verified(const Pending& p) const {
    const char* hello = p.hello.data();
    const uint32_t from = ReadU32(hello + 8);
    const uint32_t to = ReadU32(hello + 12);
    if (std::memcmp(hello, kMagic, sizeof(kMagic)) != 0 ||
        to != static_cast<uint32_t>(options_.rank) ||
        from <= static_cast<uint32_t>(options_.rank) ||
        from >= static_cast<uint32_t>(options_.world_size) || fds_[from] != -1) {
      return -1;
    }
    const int peer = static_cast<int>(from);
    const std::string nonces = p.nonce + std::string(hello + 16, kProofNonceBytes);
    const std::string expected =
        ProofTag(options_.secret, PairGroup(options_.group, options_.rank, peer),
                 options_.world_size, peer, nonces);
    if (CRYPTO_memcmp(expected.data(), hello + 16 + kProofNonceBytes, kProofTagBytes) != 0) {
      return -1;
    }
    return peer;
  }

  void DropExpired() {
    const Clock::time_point now = Clock::now();
    for (size_t i = pending_.size(); i-- > 0;) {
      if (pending_[i].deadline <= now) Drop(i);
    }
  }

  void Drop(size_t index) {
    close(pending_[index].fd);
    pending_.erase(pending_.begin() + static_cast<ptrdiff_t>(index));
  }

  const TcpMeshOptions& options_;
  const int listener_;
  std::vector<int>& fds_;
  std::vector<Pending> pending_;
};

void CloseAll(std::vector<int>& fds) {
  for (int& fd : fds) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

absl::Status ConnectLowerRanks(const TcpMeshOptions& options, RendezvousStoreClient& store,
                               Clock::time_point deadline, std::vector<int>& fds) {
  for (int peer = 0; peer < options.rank; ++peer) {
    absl::StatusOr<std::string> address = store.GetUntil(absl::StrCat("addr", peer), deadline);
    if (!address.ok()) return address.status();
    absl::StatusOr<int> fd = ConnectTo(*address, deadline);
    if (!fd.ok()) return fd.status();
    fds[peer] = *fd;
    if (absl::Status s = ProveToListener(*fd, options, peer, deadline); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpMesh>> TcpMesh::Join(const TcpMeshOptions& options,
                                                       RendezvousStoreClient* store,
                                                       Clock::time_point deadline) {
  if (options.world_size == 1) return std::unique_ptr<TcpMesh>(new TcpMesh(0, {-1}));
  absl::StatusOr<std::pair<int, std::string>> listener = Listen(options.listen_host);
  if (!listener.ok()) return listener.status();
  std::vector<int> fds(options.world_size, -1);
  absl::Status status = store->Set(absl::StrCat("addr", options.rank), listener->second);
  if (status.ok()) status = ConnectLowerRanks(options, *store, deadline, fds);
  if (status.ok()) status = Acceptor(options, listener->first, fds).Run(deadline);
  close(listener->first);
  if (!status.ok()) {
    CloseAll(fds);
    return status;
  }
  return std::unique_ptr<TcpMesh>(new TcpMesh(options.rank, std::move(fds)));
}

TcpMesh::~TcpMesh() {
  for (int fd : fds_) {
    if (fd >= 0) close(fd);
  }
}

void TcpMesh::Shutdown() {
  for (int fd : fds_) {
    if (fd >= 0) shutdown(fd, SHUT_RDWR);
  }
}

}  // namespace pagoda::worker::comm
