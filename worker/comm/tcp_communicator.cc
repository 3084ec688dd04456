#include "worker/comm/tcp_communicator.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "wire/limits.h"
#include "wire/worker_secret.h"
#include "worker/comm/tcp_mesh.h"

namespace pagoda::worker::comm {
namespace {

using Clock = std::chrono::steady_clock;

// What precedes every collective's payload on a connection (host byte
// order: every rank is the same build on the same kind of machine).
struct MessageHeader {
  uint64_t sequence;  // The collective's number in the group, from 0.
  uint64_t bytes;     // The payload's size.
};

class TcpCommunicator final : public CollectiveCommunicator {
 public:
  TcpCommunicator(std::unique_ptr<TcpMesh> mesh, std::chrono::milliseconds timeout)
      : mesh_(std::move(mesh)), timeout_(timeout) {}

  absl::Status AllReduceSum(void* data, size_t count, DType dtype) override {
    if (absl::Status s = Precheck(data, count, dtype, "AllReduceSum"); !s.ok() || count == 0) {
      return s;
    }
    const int world = world_size();
    scratch_.resize(count * static_cast<size_t>(world));
    float* mine = scratch_.data() + count * static_cast<size_t>(rank());
    ConvertToFloat(dtype, data, count, mine);
    if (absl::Status s = Exchange(reinterpret_cast<char*>(scratch_.data()), count * sizeof(float));
        !s.ok()) {
      return s;
    }
    // Rank order on every rank: the same bits everywhere.
    sum_.assign(scratch_.begin(), scratch_.begin() + static_cast<ptrdiff_t>(count));
    for (int r = 1; r < world; ++r) {
      const float* part = scratch_.data() + count * static_cast<size_t>(r);
      for (size_t i = 0; i < count; ++i) sum_[i] += part[i];
    }
    ConvertFromFloat(dtype, sum_.data(), count, data);
    return absl::OkStatus();
  }

  absl::Status AllGather(void* data, size_t count, DType dtype) override {
    if (absl::Status s = Precheck(data, count, dtype, "AllGather"); !s.ok() || count == 0) {
      return s;
    }
    // Received into owned scratch, not the caller's memory, so nothing can
    // land in the caller's buffer after a failed call returns.
    const size_t part_bytes = count * DTypeSize(dtype);
    const size_t total_bytes = part_bytes * static_cast<size_t>(world_size());
    scratch_.resize((total_bytes + sizeof(float) - 1) / sizeof(float));
    auto* bytes = reinterpret_cast<char*>(scratch_.data());
    const size_t own_offset = part_bytes * static_cast<size_t>(rank());
    std::memcpy(bytes + own_offset, static_cast<char*>(data) + own_offset, part_bytes);
    if (absl::Status s = Exchange(bytes, part_bytes); !s.ok()) return s;
    std::memcpy(data, bytes, total_bytes);
    return absl::OkStatus();
  }

  void Abort() override {
    aborted_ = true;
    mesh_->Shutdown();  // A pending Exchange wakes; the peers see the group end.
  }

  int rank() const override { return mesh_->rank(); }
  int world_size() const override { return mesh_->world_size(); }

 private:
  // One direction of one peer's message in an Exchange.
  struct Transfer {
    size_t header_done = 0;
    size_t payload_done = 0;
    MessageHeader header{};
  };

  absl::Status Precheck(const void* data, size_t count, DType dtype, const char* what) {
    if (!failure_.ok()) return failure_;
    if (aborted_.load()) return failure_ = absl::AbortedError("communicator aborted");
    return ValidateCollectiveArgs(data, count, dtype, world_size(), what);
  }

  // `buffer` holds world_size() parts of `part_bytes`; sends this rank's
  // part to every peer and receives every peer's part in its place, all
  // connections at once (no pair of ranks waits on the other's send).
  absl::Status Exchange(char* buffer, size_t part_bytes) {
    const int world = world_size();
    const MessageHeader mine{sequence_++, part_bytes};
    std::vector<Transfer> out(world), in(world);
    const Clock::time_point deadline = Clock::now() + timeout_;
    for (;;) {
      std::vector<pollfd> polled;
      for (int peer = 0; peer < world; ++peer) {
        if (peer == rank()) continue;
        short events = 0;
        if (out[peer].payload_done < part_bytes || out[peer].header_done < sizeof(MessageHeader)) {
          events |= POLLOUT;
        }
        if (in[peer].payload_done < part_bytes || in[peer].header_done < sizeof(MessageHeader)) {
          events |= POLLIN;
        }
        if (events != 0) polled.push_back({mesh_->fd(peer), events, 0});
      }
      if (polled.empty()) return absl::OkStatus();
      if (absl::Status s = Wait(polled, deadline); !s.ok()) return failure_ = s;
      for (const pollfd& p : polled) {
        const int peer = PeerOf(p.fd);
        absl::Status s;
        if (p.revents & (POLLOUT | POLLERR | POLLHUP)) {
          s = Send(p.fd, mine, buffer + part_bytes * static_cast<size_t>(rank()), out[peer]);
        }
        if (s.ok() && (p.revents & (POLLIN | POLLERR | POLLHUP))) {
          s = Receive(peer, mine, buffer + part_bytes * static_cast<size_t>(peer), in[peer]);
        }
        if (!s.ok()) return failure_ = s;
      }
    }
  }

  absl::Status Wait(std::vector<pollfd>& polled, Clock::time_point deadline) {
    for (;;) {
      if (aborted_.load()) return absl::AbortedError("communicator aborted");
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        return absl::DeadlineExceededError(
            absl::StrCat("collective timed out after ", timeout_.count(), " ms"));
      }
      const int rv = poll(polled.data(), polled.size(),
                          static_cast<int>(std::min<int64_t>(left.count(), 60'000)));
      if (rv > 0) return absl::OkStatus();
      if (rv < 0 && errno != EINTR) return Broken("poll", -1);
    }
  }

  absl::Status Send(int fd, const MessageHeader& header, const char* payload, Transfer& t) {
    for (;;) {
      const bool in_header = t.header_done < sizeof(header);
      const char* from = in_header ? reinterpret_cast<const char*>(&header) + t.header_done
                                   : payload + t.payload_done;
      const size_t left =
          in_header ? sizeof(header) - t.header_done : header.bytes - t.payload_done;
      if (left == 0) return absl::OkStatus();
      const ssize_t rv = send(fd, from, left, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (rv < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return absl::OkStatus();
        if (errno == EINTR) continue;
        return Broken("send", PeerOf(fd));
      }
      (in_header ? t.header_done : t.payload_done) += static_cast<size_t>(rv);
    }
  }

  // The header is checked before a byte of payload lands in `into`.
  absl::Status Receive(int peer, const MessageHeader& expected, char* into, Transfer& t) {
    const int fd = mesh_->fd(peer);
    for (;;) {
      const bool in_header = t.header_done < sizeof(t.header);
      char* to =
          in_header ? reinterpret_cast<char*>(&t.header) + t.header_done : into + t.payload_done;
      const size_t left =
          in_header ? sizeof(t.header) - t.header_done : expected.bytes - t.payload_done;
      if (left == 0) return absl::OkStatus();
      const ssize_t rv = recv(fd, to, left, MSG_DONTWAIT);
      if (rv < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return absl::OkStatus();
      if (rv < 0 && errno == EINTR) continue;
      if (rv <= 0) return Broken(rv == 0 ? "connection closed" : "recv", peer);
      (in_header ? t.header_done : t.payload_done) += static_cast<size_t>(rv);
      if (in_header && t.header_done == sizeof(t.header) &&
          (t.header.sequence != expected.sequence || t.header.bytes != expected.bytes)) {
        return absl::DataLossError(absl::StrCat("rank ", peer, " is out of step: collective ",
                                                t.header.sequence, " of ", t.header.bytes,
                                                " bytes where rank ", rank(), " runs ",
                                                expected.sequence, " of ", expected.bytes));
      }
    }
  }

  absl::Status Broken(const char* what, int peer) const {
    if (aborted_.load()) return absl::AbortedError("communicator aborted");
    return absl::UnavailableError(absl::StrCat("a peer rank is gone (", what, " with rank ", peer,
                                               ": ", std::strerror(errno), ")"));
  }

  int PeerOf(int fd) const {
    for (int peer = 0; peer < world_size(); ++peer) {
      if (mesh_->fd(peer) == fd) return peer;
    }
    return -1;
  }

  const std::unique_ptr<TcpMesh> mesh_;
  const std::chrono::milliseconds timeout_;
  std::atomic<bool> aborted_{false};
  // Owned by the collective thread.
  absl::Status failure_;
  uint64_t sequence_ = 0;
  std::vector<float> scratch_;
  std::vector<float> sum_;
};

absl::Status ValidateOptions(const TcpCollectiveOptions& options) {
  if (options.world_size < 1 || options.world_size > wire::kMaxWorldSize || options.rank < 0 ||
      options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("TCP communicator: rank ", options.rank, " of world size ", options.world_size,
                     " (world size must be 1..", wire::kMaxWorldSize, ")"));
  }
  if (options.timeout.count() <= 0) {
    return absl::InvalidArgumentError("TCP communicator: timeout must be positive");
  }
  if (options.world_size > 1 && (options.group_secret.size() < kMinWorkerSecretBytes ||
                                 options.group_secret.size() > kMaxWorkerSecretBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TCP communicator: a group of ", options.world_size, " needs a group secret of ",
        kMinWorkerSecretBytes, " to ", kMaxWorkerSecretBytes, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CollectiveCommunicator>> CreateTcpCommunicator(
    const TcpCollectiveOptions& options) {
  if (absl::Status valid = ValidateOptions(options); !valid.ok()) return valid;
  const Clock::time_point deadline = Clock::now() + options.timeout;
  std::unique_ptr<RendezvousStoreClient> store;
  if (options.world_size > 1) {
    absl::StatusOr<std::unique_ptr<RendezvousStoreClient>> connected =
        RendezvousStoreClient::Connect(options.rendezvous, options.timeout);
    if (!connected.ok()) return connected.status();
    store = *std::move(connected);
  }
  absl::StatusOr<std::unique_ptr<TcpMesh>> mesh =
      TcpMesh::Join(TcpMeshOptions{.rank = options.rank,
                                   .world_size = options.world_size,
                                   .listen_host = options.listen_host,
                                   .secret = options.group_secret,
                                   .group = options.rendezvous.prefix},
                    store.get(), deadline);
  if (!mesh.ok()) return mesh.status();
  return std::unique_ptr<CollectiveCommunicator>(
      new TcpCommunicator(*std::move(mesh), options.timeout));
}

}  // namespace pagoda::worker::comm
