#ifndef PAGODA_TESTS_INTEGRATION_SERVER_PROCESS_H_
#define PAGODA_TESTS_INTEGRATION_SERVER_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pagoda::testing {

// A real pagoda-server (or pagoda-worker) child process on loopback. Start()
// runs `binary args...` and waits for the stdout line "<listening_marker>
// <port>"; the rest of the child's stdout is read by a thread (so the pipe
// never fills) and scanned for the metrics port and worker pids. stderr (the
// child's logs) is inherited. Destruction SIGKILLs and reaps the child if
// still running. Thread-compatible.
class ServerProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      const std::string& binary, std::vector<std::string> args, absl::Duration timeout,
      const std::string& listening_marker = "PAGODA_SERVER_LISTENING");
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  std::string address() const;
  int metrics_port() const { return metrics_port_; }
  const std::vector<pid_t>& worker_pids() const { return worker_pids_; }

  void Signal(int signal_number);
  // Waits for the child to exit; returns its exit code (128 + signal when
  // killed), or nullopt on timeout.
  std::optional<int> WaitForExit(absl::Duration timeout);

 private:
  ServerProcess() = default;
  void ReadRest();

  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  int port_ = 0;
  int metrics_port_ = 0;
  std::vector<pid_t> worker_pids_;
  std::optional<int> exit_code_;
  std::string pending_;  // Partial stdout line.
  std::thread reader_;
};

// Runs `command` with the shell; returns its stdout, or an error with the
// exit status.
absl::StatusOr<std::string> RunCommand(const std::string& command);

// GET http://127.0.0.1:<port><path>; returns the whole response.
absl::StatusOr<std::string> HttpGet(int port, const std::string& path);

}  // namespace pagoda::testing

#endif  // PAGODA_TESTS_INTEGRATION_SERVER_PROCESS_H_
