#ifndef PAGODA_SCHEDULER_WORKERS_WORKER_LAUNCHER_H_
#define PAGODA_SCHEDULER_WORKERS_WORKER_LAUNCHER_H_

// WorkerProcess: spawning one pagoda-worker child with a private socket
// directory, a fresh secret on an inherited pipe and its step channel.

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "wire/limits.h"

namespace pagoda::scheduler {

// One pagoda-worker child process of this (server) process.
//
// Spawn makes a private directory (mode 0700, so only this user can reach the
// socket in it) and a fresh random secret, and starts `worker_binary --listen
// unix:DIR/worker.sock --rank r --parent-pid <this pid> --secret-fd 3`. The
// secret goes through a pipe the child inherits as fd 3, never through argv
// or the environment (both readable in /proc). The child also inherits, as
// fd 4 (--step-fd 4), one end of a Unix socket pair: the step channel, over
// which a one-rank group sends its step plans (common/frame_channel.h) in a
// system call each way instead of a gRPC call's hops between threads. No
// path names it, so no other process can connect to it. The child inherits no
// other descriptor but stdin, stdout (a pipe to this process) and stderr. Spawn
// reads the "PAGODA_WORKER_LISTENING unix:PATH" line; the child's stderr is
// this process's stderr and the rest of its stdout is copied there too.
// A monitor thread waits for the child and reaps it the moment it exits, then
// calls `on_exit`: the owner learns of a dead worker without polling. Only the
// monitor reaps, and signals go through a pidfd, so a recycled pid is never
// signalled by mistake.
//
// Owns the process: destruction terminates it (Terminate) and joins the
// threads. Thread-safe.
class WorkerProcess {
 public:
  // Called once from the monitor thread with a description of how the child
  // ended ("exited with status 0", "killed by signal 9"). Must not destroy the
  // WorkerProcess.
  using ExitCallback = std::function<void(const std::string& how)>;

  // Starts the worker and waits up to `start_timeout` for its port. On failure
  // (cannot exec, exits early, no port line in time) the child is killed and
  // reaped and the error is UNAVAILABLE. `on_exit` may be empty.
  // The worker takes messages up to `max_message_bytes`
  // (--max-message-bytes, in the range of wire/limits.h).
  static absl::StatusOr<std::unique_ptr<WorkerProcess>> Spawn(
      const std::string& worker_binary, int rank, absl::Duration start_timeout,
      ExitCallback on_exit, int max_message_bytes = wire::kMaxWorkerMessageBytes);

  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;
  ~WorkerProcess();

  int rank() const { return rank_; }
  pid_t pid() const { return pid_; }
  // "unix:DIR/worker.sock": the worker's only endpoint.
  const std::string& address() const { return address_; }
  // What every call to the worker must carry (common/worker_secret.h).
  const std::string& secret() const { return secret_; }
  // This process's end of the step channel (owned; valid for the object's
  // lifetime). One step at a time: the caller serialises its use.
  int step_fd() const { return step_fd_; }

  // True once the child has exited, been reaped and `on_exit` has returned.
  bool Exited();
  // Waits up to `timeout` for the child to exit by itself; true if it did.
  bool WaitForExit(absl::Duration timeout);
  // Sends SIGTERM, waits up to `grace`, then SIGKILL, and waits until the
  // child is reaped. Idempotent; returns at once if the child already exited.
  void Terminate(absl::Duration grace);

 private:
  WorkerProcess(int rank, pid_t pid, int pidfd, int stdout_fd, ExitCallback on_exit);

  // Reads the child's stdout up to the listening line; other lines are
  // forwarded. Sets address_.
  absl::Status ReadEndpoint(absl::Duration timeout);
  void Monitor();
  void ForwardStdout();
  void Signal(int signal);

  const int rank_;
  const pid_t pid_;
  const int pidfd_;      // Owned; closed in the destructor after the reap.
  const int stdout_fd_;  // Owned read end of the child's stdout pipe.
  const ExitCallback on_exit_;
  std::string socket_dir_;  // Removed (with the socket) in the destructor.
  std::string secret_;
  int step_fd_ = -1;  // Owned; closed in the destructor.
  std::string address_;
  std::string stdout_buffer_;  // Bytes read past the port line, not yet forwarded.

  absl::Mutex mutex_;
  bool exited_ ABSL_GUARDED_BY(mutex_) = false;

  std::thread monitor_;
  std::thread forwarder_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_WORKERS_WORKER_LAUNCHER_H_
