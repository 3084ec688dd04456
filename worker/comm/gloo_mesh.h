#ifndef PAGODA_WORKER_COMM_GLOO_MESH_H_
#define PAGODA_WORKER_COMM_GLOO_MESH_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gloo/context.h"
#include "worker/comm/rendezvous_store_client.h"

// The pieces of one Gloo join try (CreateGlooCommunicator runs the tries and
// the proof). Why this and not gloo::rendezvous::Context::connectFullMesh:
// Gloo's tcp pair (Debian's 0.0~git20220518) listens on its own port from
// the moment it is created and takes the first connection that arrives,
// from anyone. connectFullMesh opens every listener, then reads the peers'
// addresses one by one, and connects every pair in rank order, so a listener
// stays open for whole store round trips (and for a late peer's arrival): a
// local racer that watches /proc/net/tcp takes it first. Here every rank
// opens its listeners only once all ranks are waiting, learns every address
// the moment it is posted (the store's kWait), and closes the listeners it
// does not need (the pairs where it connects) before it waits on any other.
namespace pagoda::worker::comm {

// Opens this rank's pairs: one listener per peer, on `listen_host`, port
// picked by the OS. Each pair's connect then waits at most `connect_timeout`
// (Gloo waits 5 x the pair timeout it is given). UNAVAILABLE when Gloo
// cannot open them.
absl::StatusOr<std::shared_ptr<gloo::Context>> OpenGlooPairs(
    int rank, int world_size, const std::string& listen_host,
    std::chrono::milliseconds connect_timeout);

// Posts this rank's pair addresses under "addr<rank>", waits for every
// peer's until `deadline`, then connects every pair: first those where this
// rank is the connecting side (Gloo's rule: the larger address connects),
// which closes their listeners at once, then those where it waits for the
// peer. DEADLINE_EXCEEDED when a peer posts nothing in time, DATA_LOSS for a
// malformed address list, UNAVAILABLE when a connection fails.
absl::Status ConnectGlooPairs(gloo::Context& context, RendezvousStoreClient& store,
                              std::chrono::steady_clock::time_point deadline);

// The key a rank sets in a try's store namespace when its try failed, so
// that its peers stop waiting on connections that will never carry a proof.
inline constexpr char kTryAbortKey[] = "abort";

// Watches a try's store namespace, on its own connection and thread, for
// kTryAbortKey, and calls `on_abort` (from that thread) once it is set.
// Stop() (or destruction) ends the watch at once. Thread safety: Stop() is
// called by the owner's thread; `on_abort` must be callable from another.
class TryAbortWatch {
 public:
  // UNAVAILABLE etc. as RendezvousStoreClient::Connect.
  static absl::StatusOr<std::unique_ptr<TryAbortWatch>> Start(
      const RendezvousAddress& address, std::chrono::milliseconds connect_timeout,
      std::chrono::steady_clock::time_point until, std::function<void()> on_abort);
  ~TryAbortWatch() { Stop(); }
  TryAbortWatch(const TryAbortWatch&) = delete;
  TryAbortWatch& operator=(const TryAbortWatch&) = delete;

  // Ends the watch and joins its thread. Idempotent.
  void Stop();
  // Whether `on_abort` ran.
  bool fired() const { return fired_.load(); }

 private:
  explicit TryAbortWatch(std::unique_ptr<RendezvousStoreClient> store)
      : store_(std::move(store)) {}

  const std::unique_ptr<RendezvousStoreClient> store_;
  std::atomic<bool> fired_{false};
  std::thread thread_;
};

}  // namespace pagoda::worker::comm

#endif  // PAGODA_WORKER_COMM_GLOO_MESH_H_
