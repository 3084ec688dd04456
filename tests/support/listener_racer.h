#ifndef PAGODA_TESTS_SUPPORT_LISTENER_RACER_H_
#define PAGODA_TESTS_SUPPORT_LISTENER_RACER_H_

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace pagoda::testing {

// The attacker of the collective bootstrap tests: a local process that
// watches the socket tables and connects to every new TCP listener of the
// processes it targets, as fast as it can read /proc, then sends one of
// HostilePayloads() (in turn) and closes. Only the targets' listeners are touched (the
// machine is shared), and never `spared_ports` (the rendezvous store's:
// reaching it is harmless, and not the race under test).
// Thread safety: connections() from any thread; the rest is the racer's.
class ListenerRacer {
 public:
  // What it sends, one per connection in turn: 64 zero bytes; a Gloo
  // message header naming a slot nobody posted (48 bytes that ended a rank
  // when Pagoda's ranks spoke Gloo); and a TCP mesh hello (tcp_mesh.h) with
  // the right layout, ranks 1 -> 0 and a zero tag, sent before the nonce
  // arrives.
  static std::vector<std::string> HostilePayloads();

  // `targets` is called on every scan: the pids whose listeners to race.
  ListenerRacer(std::function<std::vector<pid_t>()> targets, std::set<int> spared_ports);
  ~ListenerRacer();
  ListenerRacer(const ListenerRacer&) = delete;
  ListenerRacer& operator=(const ListenerRacer&) = delete;

  // Listeners it connected to (each accepted its connection) so far.
  int connections() const { return connections_.load(); }

 private:
  void Run();

  const std::function<std::vector<pid_t>()> targets_;
  const std::set<int> spared_ports_;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

}  // namespace pagoda::testing

#endif  // PAGODA_TESTS_SUPPORT_LISTENER_RACER_H_
