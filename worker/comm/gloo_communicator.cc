#include "worker/comm/gloo_communicator.h"

#include <atomic>
#include <cstring>
#include <exception>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"
#include "wire/limits.h"

namespace pagoda::worker::comm {
namespace {

using Clock = std::chrono::steady_clock;

class GlooCommunicator final : public CollectiveCommunicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::Context> context, std::chrono::milliseconds timeout)
      : context_(std::move(context)), timeout_(timeout) {}
  ~GlooCommunicator() override = default;

  absl::Status AllReduceSum(void* data, size_t count, DType dtype) override {
    if (absl::Status s = Precheck(data, count, dtype, "AllReduceSum"); !s.ok() || count == 0) {
      return s;
    }
    const int world = world_size();
    scratch_.resize(count * static_cast<size_t>(world));
    float* mine = scratch_.data() + count * static_cast<size_t>(rank());
    ConvertToFloat(dtype, data, count, mine);
    if (absl::Status s = Exchange(scratch_.data(), count * sizeof(float)); !s.ok()) return s;
    // Rank order on every rank: the same bits everywhere.
    std::vector<float>& sum = sum_;
    sum.assign(scratch_.begin(), scratch_.begin() + static_cast<ptrdiff_t>(count));
    for (int r = 1; r < world; ++r) {
      const float* part = scratch_.data() + count * static_cast<size_t>(r);
      for (size_t i = 0; i < count; ++i) sum[i] += part[i];
    }
    ConvertFromFloat(dtype, sum.data(), count, data);
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
    absl::MutexLock lock(&mu_);
    aborted_ = true;
    // Closing first: once a pair is closed Gloo's event loop no longer
    // touches its buffers, and the peers see the connection drop at once.
    if (!connections_closed_) {
      connections_closed_ = true;
      try {
        context_->closeConnections();
      } catch (const std::exception&) {
        // Already broken: nothing more to close.
      }
    }
    if (in_flight_ != nullptr) {
      in_flight_->abortWaitRecv();
      in_flight_->abortWaitSend();
    }
  }

  int rank() const override { return context_->rank; }
  int world_size() const override { return context_->size; }

 private:
  absl::Status Precheck(const void* data, size_t count, DType dtype, const char* what) {
    if (!failure_.ok()) return failure_;
    if (aborted_.load()) return failure_ = absl::AbortedError("communicator aborted");
    return ValidateCollectiveArgs(data, count, dtype, world_size(), what);
  }

  // `buffer` holds world_size() parts of `part_bytes`; sends this rank's part
  // to every peer and receives every peer's part in its place.
  absl::Status Exchange(void* buffer, size_t part_bytes) {
    const int world = world_size();
    std::unique_ptr<gloo::transport::UnboundBuffer> unbound;
    const Clock::time_point deadline = Clock::now() + timeout_;
    try {
      unbound = context_->createUnboundBuffer(buffer, part_bytes * static_cast<size_t>(world));
      {
        absl::MutexLock lock(&mu_);
        if (aborted_) return failure_ = absl::AbortedError("communicator aborted");
        in_flight_ = unbound.get();
      }
      const uint64_t slot = static_cast<uint64_t>(context_->nextSlot());
      for (int peer = 0; peer < world; ++peer) {
        if (peer == rank()) continue;
        unbound->send(peer, slot, part_bytes * static_cast<size_t>(rank()), part_bytes);
        unbound->recv(peer, slot, part_bytes * static_cast<size_t>(peer), part_bytes);
      }
      bool completed = true;
      for (int i = 0; i < world - 1 && completed; ++i)
        completed = unbound->waitRecv(Left(deadline));
      for (int i = 0; i < world - 1 && completed; ++i)
        completed = unbound->waitSend(Left(deadline));
      if (!completed) failure_ = absl::AbortedError("communicator aborted");
    } catch (const std::exception& e) {
      failure_ = ClassifyGlooError(e.what());
    }
    absl::MutexLock lock(&mu_);
    in_flight_ = nullptr;
    return failure_;
  }

  std::chrono::milliseconds Left(Clock::time_point deadline) const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return std::max(left, std::chrono::milliseconds(1));
  }

  absl::Status ClassifyGlooError(const std::string& what) {
    if (aborted_.load()) return absl::AbortedError(absl::StrCat("communicator aborted: ", what));
    if (absl::StrContains(what, "Timed out") || absl::StrContains(what, "timeout")) {
      return absl::DeadlineExceededError(
          absl::StrCat("collective timed out after ", timeout_.count(), " ms: ", what));
    }
    return absl::UnavailableError(absl::StrCat("a peer rank is gone: ", what));
  }

  const std::shared_ptr<gloo::Context> context_;
  const std::chrono::milliseconds timeout_;
  // Owned by the collective thread.
  absl::Status failure_;
  std::vector<float> scratch_;
  std::vector<float> sum_;

  absl::Mutex mu_;
  std::atomic<bool> aborted_{false};
  bool connections_closed_ ABSL_GUARDED_BY(mu_) = false;
  gloo::transport::UnboundBuffer* in_flight_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CollectiveCommunicator>> CreateGlooCommunicator(
    const GlooOptions& options) {
  if (options.world_size < 1 || options.world_size > wire::kMaxWorldSize || options.rank < 0 ||
      options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("Gloo communicator: rank ", options.rank,
                                                   " of world size ", options.world_size,
                                                   " (world size must be 1..", wire::kMaxWorldSize, ")"));
  }
  if (options.timeout.count() <= 0) {
    return absl::InvalidArgumentError("Gloo communicator: timeout must be positive");
  }
  absl::StatusOr<std::unique_ptr<RendezvousStoreClient>> store =
      RendezvousStoreClient::Connect(options.rendezvous, options.timeout);
  if (!store.ok()) return store.status();
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.listen_host;
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.world_size);
    context->setTimeout(options.timeout);
    context->connectFullMesh(**store, device);
    return std::unique_ptr<CollectiveCommunicator>(
        new GlooCommunicator(std::move(context), options.timeout));
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("rank ", options.rank, " could not join the Gloo group: ", e.what()));
  }
}

}  // namespace pagoda::worker::comm
