#ifndef PAGODA_WIRE_RENDEZVOUS_STORE_SERVER_H_
#define PAGODA_WIRE_RENDEZVOUS_STORE_SERVER_H_

// RendezvousStoreServer: the key-value store where a tensor-parallel group's
// ranks exchange addresses, run by pagoda-server.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace pagoda::wire {

// A small key-value store over TCP where the ranks of a tensor-parallel group
// exchange their listening addresses. The server process (pagoda-server) starts
// one per group and hands its address and secret to every worker in
// LoadModel; nothing assumes a shared filesystem between hosts.
//
// Security: every local process can reach the port, so a connection must
// first present the shared secret (compared in constant time), frames are
// strictly checked (see rendezvous_protocol.h), keys and values are bounded,
// the store as a whole is bounded (kMaxKeys, kMaxStoreBytes), at most
// `max_connections` are served at once, a connection must authenticate
// within 2 s, and an idle one is closed after `idle_timeout`. Any violation
// closes that connection only. A kWait blocks its connection's own thread
// for at most rendezvous::kMaxWaitMillis.
//
// Thread safety: all methods are thread-safe. The destructor stops the
// server and joins its threads.
class RendezvousStoreServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";  // Address to bind.
    int port = 0;                    // 0: an ephemeral port, see port().
    std::string secret;              // kMinWorkerSecretBytes..kMaxWorkerSecretBytes.
    int max_connections = 64;
    std::chrono::milliseconds idle_timeout{30000};
  };
  static constexpr size_t kMaxKeys = 4096;
  static constexpr size_t kMaxStoreBytes = size_t{16} << 20;

  // Binds and starts serving. INVALID_ARGUMENT for a bad secret or host,
  // UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<RendezvousStoreServer>> Start(const Options& options);
  ~RendezvousStoreServer();
  RendezvousStoreServer(const RendezvousStoreServer&) = delete;
  RendezvousStoreServer& operator=(const RendezvousStoreServer&) = delete;

  int port() const { return port_; }
  // Serves one connected stream socket on the calling thread, exactly as an
  // accepted connection is served, until the peer ends the stream, violates
  // the protocol or the server stops. The caller owns `fd` and closes it.
  // For tests and the fuzzer, which drive the store over a socketpair
  // instead of a new TCP connection per input.
  void ServeConnection(int fd);
  // Connections refused or closed for a protocol or authentication violation
  // since start (for tests and logs).
  int rejected_connections() const { return rejected_.load(); }

 private:
  struct Connection;
  RendezvousStoreServer(const Options& options, int listen_fd, int port);
  void AcceptLoop();
  // Applies one authenticated request; returns the reply to send.
  std::string Apply(int op, const std::string& key, std::string value);
  // kWait: the reply once `key` is set, or kNotFound after `millis` (or at
  // once when the server stops). Blocks only this connection's thread.
  std::string WaitFor(const std::string& key, uint32_t millis);
  // ServeConnection without the count: true when the connection ended on
  // a violation (a malformed or unauthenticated frame) while running.
  bool ServeUntilEnd(int fd);
  void ReapFinished() ABSL_EXCLUSIVE_LOCKS_REQUIRED(connections_mu_);

  const Options options_;
  const int listen_fd_;
  const int port_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> rejected_{0};

  absl::Mutex store_mu_;
  std::map<std::string, std::string> store_ ABSL_GUARDED_BY(store_mu_);
  size_t store_bytes_ ABSL_GUARDED_BY(store_mu_) = 0;

  absl::Mutex connections_mu_;
  std::list<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(connections_mu_);

  std::thread accept_thread_;
};


}  // namespace pagoda::wire

#endif  // PAGODA_WIRE_RENDEZVOUS_STORE_SERVER_H_
