#ifndef PAGODA_WORKER_COMM_RENDEZVOUS_STORE_CLIENT_H_
#define PAGODA_WORKER_COMM_RENDEZVOUS_STORE_CLIENT_H_

// The ranks' client of the server's rendezvous store: where it is, and the
// calls that publish and wait for a group's keys.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "wire/rendezvous_protocol.h"

namespace pagoda::worker::comm {

// The store's protocol and server are the server's and the ranks' common
// ground (wire/); this client is the ranks' side of it.
namespace rendezvous = ::pagoda::wire::rendezvous;

// Where a group's rendezvous store is and how to talk to it: what the server
// hands every rank in LoadModel.
struct RendezvousAddress {
  std::string host;  // IPv4 address of the RendezvousStoreServer.
  int port = 0;
  std::string secret;  // The server's shared secret.
  std::string prefix;  // Namespaces the keys of one group (one launch).
};

// A connection to a RendezvousStoreServer. Every key is stored under
// "<prefix>/<key>".
// Thread safety: thread-safe (one request on the socket at a time).
class RendezvousStoreClient final {
 public:
  // Connects and authenticates. UNAVAILABLE when unreachable, PERMISSION_DENIED
  // when the server refuses the secret, RESOURCE_EXHAUSTED when it serves its
  // maximum of connections, DEADLINE_EXCEEDED after `timeout`.
  static absl::StatusOr<std::unique_ptr<RendezvousStoreClient>> Connect(
      const RendezvousAddress& address, std::chrono::milliseconds timeout);
  ~RendezvousStoreClient();
  RendezvousStoreClient(const RendezvousStoreClient&) = delete;
  RendezvousStoreClient& operator=(const RendezvousStoreClient&) = delete;

  absl::Status Set(const std::string& key, const std::string& value);
  // Waits until `key` exists, up to the client's timeout. The store answers
  // the moment the key is set (kWait), not at a next poll.
  absl::StatusOr<std::string> Get(const std::string& key);
  // Same, up to `deadline` instead (DEADLINE_EXCEEDED after it).
  absl::StatusOr<std::string> GetUntil(const std::string& key,
                                       std::chrono::steady_clock::time_point deadline);
  // Ends a call that another thread has in progress (it fails with
  // UNAVAILABLE), and every later call: for a thread that waits on the store
  // on someone else's behalf and must be stopped. Callable from any thread.
  void Interrupt();

 private:
  RendezvousStoreClient(int fd, std::string prefix, std::chrono::milliseconds timeout)
      : fd_(fd), prefix_(std::move(prefix)), timeout_(timeout) {}
  // One request/response; NOT_FOUND for a missing key on kGet.
  absl::StatusOr<std::string> Call(int op, const std::string& key, const std::string& value,
                                   std::chrono::steady_clock::time_point deadline);

  absl::Mutex mu_;
  const int fd_;
  const std::string prefix_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace pagoda::worker::comm

#endif  // PAGODA_WORKER_COMM_RENDEZVOUS_STORE_CLIENT_H_
