#include "worker/comm/rank_group_for_test.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "wire/rendezvous_store_server.h"
#include "wire/worker_secret.h"

extern char** environ;

namespace pagoda::worker::comm {

using ::pagoda::wire::RendezvousStoreServer;
namespace {

using Clock = std::chrono::steady_clock;

// argv/envp arrays pointing into `strings` (which must outlive them).
std::vector<char*> NullTerminated(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

void KillAndReap(const std::vector<pid_t>& pids, std::vector<bool>* reaped) {
  for (size_t rank = 0; rank < pids.size(); ++rank) {
    if ((*reaped)[rank]) continue;
    kill(pids[rank], SIGKILL);
    waitpid(pids[rank], nullptr, 0);
    (*reaped)[rank] = true;
  }
}

}  // namespace

absl::StatusOr<RankGroupRun> RunRankGroup(
    int world, const std::function<std::vector<std::string>(int rank, int store_port)>& args_of,
    std::chrono::seconds limit) {
  RendezvousStoreServer::Options options;
  auto secret = GenerateWorkerSecret();
  if (!secret.ok()) return secret.status();
  options.secret = *secret;
  auto store = RendezvousStoreServer::Start(options);
  if (!store.ok()) return store.status();

  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  env.push_back(absl::StrCat(kTestRendezvousSecretEnv, "=", options.secret));
  std::vector<char*> envp = NullTerminated(env);

  const auto start = Clock::now();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    std::vector<std::string> args = args_of(rank, (*store)->port());
    std::vector<char*> argv = NullTerminated(args);
    pid_t pid = 0;
    if (const int error = posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), envp.data());
        error != 0) {
      std::vector<bool> reaped(pids.size(), false);
      KillAndReap(pids, &reaped);
      return absl::InternalError(absl::StrCat("spawning rank ", rank, " (", args[0],
                                              ") failed: errno ", error));
    }
    pids.push_back(pid);
  }

  RankGroupRun run;
  run.ranks.resize(world);
  std::vector<bool> reaped(world, false);
  for (int left = world; left > 0;) {
    for (int rank = 0; rank < world; ++rank) {
      int status = 0;
      if (reaped[rank] || waitpid(pids[rank], &status, WNOHANG) != pids[rank]) continue;
      reaped[rank] = true;
      --left;
      run.ranks[rank].exited = WIFEXITED(status);
      run.ranks[rank].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      run.ranks[rank].signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    }
    if (left > 0 && Clock::now() - start > limit) {
      run.timed_out = true;
      KillAndReap(pids, &reaped);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  run.took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  return run;
}

}  // namespace pagoda::worker::comm
