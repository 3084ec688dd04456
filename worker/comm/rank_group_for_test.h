#ifndef PAGODA_WORKER_COMM_RANK_GROUP_FOR_TEST_H_
#define PAGODA_WORKER_COMM_RANK_GROUP_FOR_TEST_H_

// Multi-process collective tests: one real process per rank, joined through a
// rendezvous store that this helper starts. Tests only.

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pagoda::worker::comm {

// The environment variable that carries the store's secret to the ranks (a
// secret on a command line would be readable by any local user).
inline constexpr char kTestRendezvousSecretEnv[] = "PAGODA_TEST_RENDEZVOUS_SECRET";

// How one rank process ended.
struct RankOutcome {
  bool exited = false;  // false: killed by a signal, or still running at the limit.
  int exit_code = -1;
  int signal = 0;
  bool succeeded() const { return exited && exit_code == 0; }
};

struct RankGroupRun {
  std::vector<RankOutcome> ranks;
  std::chrono::milliseconds took{0};  // From the first spawn to the last exit.
  bool timed_out = false;             // Some rank ran past the limit and was killed.
};

// Starts a rendezvous store, spawns `world` processes, rank r with the
// arguments args_of(r, store_port) (argv[0] is the binary) and the secret in
// kTestRendezvousSecretEnv, and waits for all of them. Ranks still running
// after `limit` are killed with SIGKILL, so a hang fails the test instead of
// stalling the suite. Errors: the store could not start, or a spawn failed
// (ranks already spawned are killed and reaped).
absl::StatusOr<RankGroupRun> RunRankGroup(
    int world, const std::function<std::vector<std::string>(int rank, int store_port)>& args_of,
    std::chrono::seconds limit);

}  // namespace pagoda::worker::comm

#endif  // PAGODA_WORKER_COMM_RANK_GROUP_FOR_TEST_H_
