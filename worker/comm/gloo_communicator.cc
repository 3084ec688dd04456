#include "worker/comm/gloo_communicator.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gloo/context.h"
#include "glog/logging.h"
#include "gloo/transport/unbound_buffer.h"
#include "wire/limits.h"
#include "wire/worker_secret.h"
#include "worker/comm/collective_proof.h"
#include "worker/comm/gloo_mesh.h"

namespace pagoda::worker::comm {
namespace {

using Clock = std::chrono::steady_clock;

class GlooCommunicator final : public CollectiveCommunicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::Context> context, std::chrono::milliseconds timeout)
      : context_(std::move(context)), timeout_(timeout) {}
  // The join's proof runs within the try's deadline, the group's
  // collectives within the collective timeout. Collective thread only.
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }
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
  // Owned by the collective thread.
  std::chrono::milliseconds timeout_;
  absl::Status failure_;
  std::vector<float> scratch_;
  std::vector<float> sum_;

  absl::Mutex mu_;
  std::atomic<bool> aborted_{false};
  bool connections_closed_ ABSL_GUARDED_BY(mu_) = false;
  gloo::transport::UnboundBuffer* in_flight_ ABSL_GUARDED_BY(mu_) = nullptr;
};

// The proof's byte rounds through the group's own pairs (AllGather moves
// bytes as they are, whatever the dtype says).
absl::Status ProveOverPairs(GlooCommunicator& comm, const GlooOptions& options,
                            const std::string& group) {
  return ProveGroupSecret(options.rank, options.world_size, options.group_secret, group,
                          [&comm](char* all, size_t part_bytes) {
                            return comm.AllGather(all, part_bytes / sizeof(float), DType::kF32);
                          });
}

std::chrono::milliseconds Until(Clock::time_point deadline) {
  return std::max(std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()),
                  std::chrono::milliseconds(1));
}

// One try's pairs and proof, all within `deadline`. A peer that fails its
// try sets kTryAbortKey; the watch then aborts this rank's pairs, so no rank
// waits out the deadline on connections that will never carry a proof.
absl::StatusOr<std::unique_ptr<GlooCommunicator>> ConnectAndProve(
    const GlooOptions& options, RendezvousStoreClient& store, const RendezvousAddress& address,
    Clock::time_point deadline) {
  absl::StatusOr<std::shared_ptr<gloo::Context>> context =
      OpenGlooPairs(options.rank, options.world_size, options.listen_host, Until(deadline));
  if (!context.ok()) return context.status();
  auto comm = std::make_unique<GlooCommunicator>(*context, Until(deadline));
  absl::StatusOr<std::unique_ptr<TryAbortWatch>> watch = TryAbortWatch::Start(
      address, options.timeout, deadline, [raw = comm.get()] { raw->Abort(); });
  if (!watch.ok()) return watch.status();
  absl::Status joined = ConnectGlooPairs(**context, store, deadline);
  if (joined.ok()) {
    comm->set_timeout(Until(deadline));
    joined = ProveOverPairs(*comm, options, address.prefix);
  }
  (*watch)->Stop();
  // A peer's abort is why this try failed, unless this rank saw a wrong tag.
  if ((*watch)->fired() && !absl::IsPermissionDenied(joined)) {
    return absl::AbortedError(absl::StrCat("a peer of rank ", options.rank,
                                           " failed this join try (", joined.ToString(), ")"));
  }
  if (!joined.ok()) {
    comm->Abort();  // The peers' pending rounds end now, not at their deadline.
    return joined;
  }
  comm->set_timeout(options.timeout);
  return comm;
}

// Posts this rank's verdict on the try and reads every rank's: true when all
// joined. Errors when a rank posts nothing before `deadline`.
absl::StatusOr<bool> EveryRankJoined(RendezvousStoreClient& store, const GlooOptions& options,
                                     bool joined, Clock::time_point deadline) {
  if (absl::Status s = store.Set(absl::StrCat("verdict", options.rank), joined ? "1" : "0");
      !s.ok()) {
    return s;
  }
  bool all = true;
  for (int rank = 0; rank < options.world_size; ++rank) {
    absl::StatusOr<std::string> verdict = store.GetUntil(absl::StrCat("verdict", rank), deadline);
    if (!verdict.ok()) return verdict.status();
    all = all && *verdict == "1";
  }
  return all;
}

// Every rank sets "ready<rank>" and waits for all: no rank opens a listener
// while a peer is still on its way (the racer's best window).
absl::Status EveryRankReady(RendezvousStoreClient& store, const GlooOptions& options,
                            Clock::time_point deadline) {
  if (absl::Status s = store.Set(absl::StrCat("ready", options.rank), "1"); !s.ok()) return s;
  for (int rank = 0; rank < options.world_size; ++rank) {
    absl::StatusOr<std::string> ready = store.GetUntil(absl::StrCat("ready", rank), deadline);
    if (!ready.ok()) return ready.status();
  }
  return absl::OkStatus();
}

// What one try ended with: a group, a failure that the next try may not
// have (`retry`), or one that ends the join.
struct TryOutcome {
  absl::StatusOr<std::unique_ptr<GlooCommunicator>> comm;
  bool retry = false;
  bool ran_out_of_time = false;  // It ended at its deadline, not on an error.
};

TryOutcome RunJoinTry(const GlooOptions& options, int attempt,
                      std::chrono::milliseconds try_timeout, Clock::time_point join_deadline) {
  RendezvousAddress address = options.rendezvous;
  address.prefix = absl::StrCat(address.prefix, "/try", attempt);
  absl::StatusOr<std::unique_ptr<RendezvousStoreClient>> store =
      RendezvousStoreClient::Connect(address, options.timeout);
  if (!store.ok()) return {store.status()};
  if (absl::Status ready = EveryRankReady(**store, options, join_deadline); !ready.ok()) {
    return {ready};
  }
  const Clock::time_point try_deadline = Clock::now() + try_timeout;
  TryOutcome outcome{ConnectAndProve(options, **store, address, try_deadline)};
  outcome.ran_out_of_time = Clock::now() >= try_deadline;
  if (!outcome.comm.ok()) (*store)->Set(kTryAbortKey, "1").IgnoreError();
  // A live rank posts its verdict within world_size x try_timeout (its
  // connects wait one try_timeout each at most); one more for a rank that
  // the scheduler kept waiting.
  absl::StatusOr<bool> all_joined = EveryRankJoined(
      **store, options, outcome.comm.ok(), try_deadline + options.world_size * try_timeout);
  if (!all_joined.ok()) {
    if (outcome.comm.ok()) outcome.comm = all_joined.status();
    return outcome;
  }
  if (*all_joined) return outcome;
  if (outcome.comm.ok()) {
    outcome.comm = absl::UnavailableError(
        absl::StrCat("a peer of rank ", options.rank, " failed to join the group"));
  }
  outcome.retry = true;
  return outcome;
}

absl::Status ValidateGlooOptions(const GlooOptions& options) {
  if (options.world_size < 1 || options.world_size > wire::kMaxWorldSize || options.rank < 0 ||
      options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("Gloo communicator: rank ", options.rank,
                                                   " of world size ", options.world_size,
                                                   " (world size must be 1..", wire::kMaxWorldSize, ")"));
  }
  if (options.timeout.count() <= 0) {
    return absl::InvalidArgumentError("Gloo communicator: timeout must be positive");
  }
  if (options.world_size > 1 && (options.group_secret.size() < kMinWorkerSecretBytes ||
                                 options.group_secret.size() > kMaxWorkerSecretBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Gloo communicator: a group of ", options.world_size, " needs a group secret of ",
        kMinWorkerSecretBytes, " to ", kMaxWorkerSecretBytes, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CollectiveCommunicator>> CreateGlooCommunicator(
    const GlooOptions& options) {
  if (absl::Status valid = ValidateGlooOptions(options); !valid.ok()) return valid;
  const Clock::time_point join_deadline = Clock::now() + options.timeout;
  std::chrono::milliseconds try_timeout = std::min(kFirstGlooTryTimeout, options.timeout);
  for (int attempt = 1;; ++attempt) {
    TryOutcome outcome = RunJoinTry(options, attempt, try_timeout, join_deadline);
    if (outcome.comm.ok()) return std::unique_ptr<CollectiveCommunicator>(*std::move(outcome.comm));
    if (!outcome.retry) return outcome.comm.status();
    LOG(WARNING) << "rank " << options.rank << ": Gloo join try " << attempt << " failed ("
                 << outcome.comm.status() << ")";
    if (attempt == kMaxGlooJoinTries || Clock::now() >= join_deadline) {
      return outcome.comm.status();
    }
    // A try that ran into its deadline may have been too short for this
    // machine's load, not attacked: the next one gets twice the time.
    if (outcome.ran_out_of_time) {
      try_timeout = std::min(2 * try_timeout, options.timeout);
    }
  }
}

}  // namespace pagoda::worker::comm
