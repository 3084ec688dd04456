#include "scheduler/workers/worker_launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "wire/worker_secret.h"

extern char** environ;

namespace pagoda::scheduler {
namespace {

constexpr absl::string_view kListeningPrefix = "PAGODA_WORKER_LISTENING ";
// Grace a worker gets to stop by itself when a failed start is cleaned up.
constexpr absl::Duration kFailedStartGrace = absl::Milliseconds(500);
constexpr absl::Duration kDestructorGrace = absl::Seconds(2);
// The descriptors the child reads its secret from and serves its step
// channel on.
constexpr int kSecretFd = 3;
constexpr int kStepFd = 4;

// A fresh directory only this user can open, for the worker's socket.
absl::StatusOr<std::string> MakePrivateSocketDir() {
  const char* tmp = std::getenv("TMPDIR");
  // Socket paths are limited to 108 bytes: fall back to /tmp for a long TMPDIR.
  std::string base = tmp != nullptr && *tmp != '\0' && std::strlen(tmp) < 64 ? tmp : "/tmp";
  std::string dir_template = base + "/pagoda-worker-XXXXXX";
  if (mkdtemp(dir_template.data()) == nullptr) {  // mkdtemp creates it 0700.
    return absl::UnavailableError(absl::StrCat("mkdtemp ", dir_template, ": ", strerror(errno)));
  }
  return dir_template;
}

// A pipe whose read end holds `secret` followed by end of file.
absl::StatusOr<int> SecretPipe(const std::string& secret) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    return absl::UnavailableError(absl::StrCat("pipe2: ", strerror(errno)));
  // A secret is far below the pipe's capacity, so this write cannot block.
  const ssize_t written = write(fds[1], secret.data(), secret.size());
  close(fds[1]);
  if (written != static_cast<ssize_t>(secret.size())) {
    close(fds[0]);
    return absl::UnavailableError("cannot write the worker secret to its pipe");
  }
  return fds[0];
}

// `fd` moved to a descriptor above `floor` (close-on-exec), so that the
// spawn's dup2 onto kSecretFd and kStepFd cannot overwrite a source that
// happens to sit on the other target. Closes `fd`; -1 on failure.
int MoveAbove(int fd, int floor) {
  const int moved = fcntl(fd, F_DUPFD_CLOEXEC, floor + 1);
  close(fd);
  return moved;
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)),
                        ")");
  }
  return absl::StrCat("ended with wait status ", status);
}

void WriteAllToStderr(absl::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t written = write(STDERR_FILENO, bytes.data(), bytes.size());
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return;  // Nowhere to forward to; drop the output.
    bytes.remove_prefix(static_cast<size_t>(written));
  }
}

// The descriptors a worker starts with. This process keeps the read end of
// the child's stdout and its end of the step channel; the child gets the
// rest, held above kStepFd until the spawn puts them in place.
struct ChildDescriptors {
  int stdout_read = -1;
  int stdout_write = -1;  // Becomes the child's stdout.
  int secret_read = -1;   // Becomes its kSecretFd.
  int step_parent = -1;   // Stays here: WorkerProcess::step_fd().
  int step_child = -1;    // Becomes its kStepFd.
};

// Opens the secret pipe, the stdout pipe and the step channel; on failure
// closes whatever it opened.
absl::StatusOr<ChildDescriptors> OpenChildDescriptors(const std::string& secret) {
  absl::StatusOr<int> secret_fd = SecretPipe(secret);
  if (!secret_fd.ok()) return secret_fd.status();
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    close(*secret_fd);
    return absl::UnavailableError(absl::StrCat("pipe2: ", strerror(errno)));
  }
  // The step channel: [0] stays here, [1] becomes the child's kStepFd.
  int step_fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, step_fds) != 0) {
    close(*secret_fd);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    return absl::UnavailableError(absl::StrCat("socketpair: ", strerror(errno)));
  }
  step_fds[1] = MoveAbove(step_fds[1], kStepFd);
  *secret_fd = MoveAbove(*secret_fd, kStepFd);
  if (step_fds[1] < 0 || *secret_fd < 0) {
    if (step_fds[1] >= 0) close(step_fds[1]);
    if (*secret_fd >= 0) close(*secret_fd);
    close(step_fds[0]);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    return absl::UnavailableError(absl::StrCat("fcntl(F_DUPFD_CLOEXEC): ", strerror(errno)));
  }
  return ChildDescriptors{pipe_fds[0], pipe_fds[1], *secret_fd, step_fds[0], step_fds[1]};
}

std::vector<std::string> WorkerArguments(const std::string& worker_binary,
                                         const std::string& socket_dir, int rank,
                                         int max_message_bytes) {
  return {worker_binary,
          "--listen",
          absl::StrCat("unix:", socket_dir, "/worker.sock"),
          "--rank",
          absl::StrCat(rank),
          "--parent-pid",
          absl::StrCat(getpid()),
          "--secret-fd",
          absl::StrCat(kSecretFd),
          "--step-fd",
          absl::StrCat(kStepFd),
          "--max-message-bytes",
          absl::StrCat(max_message_bytes)};
}

// Starts `args` with the child's ends of `fds` in place and nothing else of
// this process. Returns posix_spawn's error number (0: started, `pid` set).
int SpawnChild(const std::string& worker_binary, std::vector<std::string> args,
               const ChildDescriptors& fds, pid_t* pid) {
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  // posix_spawn rather than fork: it runs no atfork handlers (gRPC's threads
  // are live here) and reports a failed exec as an error.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds.stdout_write, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds.secret_read, kSecretFd);
  posix_spawn_file_actions_adddup2(&actions, fds.step_child, kStepFd);
  // Nothing else of this process (client sockets, model files, other
  // workers' pipes and channels) reaches the worker, whether or not it is
  // close-on-exec.
  posix_spawn_file_actions_addclosefrom_np(&actions, kStepFd + 1);
  // A child inherits the caller's signal mask across exec. pagoda-server
  // blocks SIGTERM and SIGINT in every thread (it sigwait()s for them), so
  // without this the worker would ignore the SIGTERM that Terminate() sends
  // and only a SIGKILL after the grace would stop it.
  //
  // The worker also gets a session of its own. A terminal's Ctrl-C sends
  // SIGINT to its whole foreground process group; a worker in that group
  // would stop at once, mid-drain, and the server would see a crashed
  // worker and start another. In its own session (and so its own process
  // group, without the terminal) it hears only the server, which stops it
  // after draining; --parent-pid still ends it if the server dies.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t no_signals;
  sigemptyset(&no_signals);
  posix_spawnattr_setsigmask(&attributes, &no_signals);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSID);
  const int spawn_error =
      posix_spawn(pid, worker_binary.c_str(), &actions, &attributes, argv.data(), environ);
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  return spawn_error;
}

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerProcess>> WorkerProcess::Spawn(
    const std::string& worker_binary, int rank, absl::Duration start_timeout,
    ExitCallback on_exit, int max_message_bytes) {
  absl::StatusOr<std::string> secret = GenerateWorkerSecret();
  if (!secret.ok()) return absl::UnavailableError(secret.status().message());
  absl::StatusOr<std::string> socket_dir = MakePrivateSocketDir();
  if (!socket_dir.ok()) return socket_dir.status();
  auto remove_dir = [&] { std::filesystem::remove_all(*socket_dir); };
  absl::StatusOr<ChildDescriptors> fds = OpenChildDescriptors(*secret);
  if (!fds.ok()) {
    remove_dir();
    return fds.status();
  }
  pid_t pid = 0;
  const int spawn_error =
      SpawnChild(worker_binary, WorkerArguments(worker_binary, *socket_dir, rank, max_message_bytes),
                 *fds, &pid);
  // The child holds its own copies now (or never will).
  close(fds->stdout_write);
  close(fds->secret_read);
  close(fds->step_child);
  if (spawn_error != 0) {
    close(fds->stdout_read);
    close(fds->step_parent);
    remove_dir();
    return absl::UnavailableError(absl::StrCat("cannot start worker rank ", rank, " from '",
                                               worker_binary, "': ", strerror(spawn_error)));
  }
  // Only this object reaps the child, so until then `pid` names it.
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  std::unique_ptr<WorkerProcess> process(
      new WorkerProcess(rank, pid, pidfd, fds->stdout_read, std::move(on_exit)));
  process->socket_dir_ = *std::move(socket_dir);
  process->secret_ = *std::move(secret);
  process->step_fd_ = fds->step_parent;
  absl::Status started = process->ReadEndpoint(start_timeout);
  if (!started.ok()) {
    process->Terminate(kFailedStartGrace);
    return started;
  }
  process->forwarder_ = std::thread(&WorkerProcess::ForwardStdout, process.get());
  LOG(INFO) << "worker rank " << rank << " started: pid " << pid << ", " << process->address_;
  return process;
}

WorkerProcess::WorkerProcess(int rank, pid_t pid, int pidfd, int stdout_fd, ExitCallback on_exit)
    : rank_(rank), pid_(pid), pidfd_(pidfd), stdout_fd_(stdout_fd), on_exit_(std::move(on_exit)) {
  monitor_ = std::thread(&WorkerProcess::Monitor, this);
}

WorkerProcess::~WorkerProcess() {
  Terminate(kDestructorGrace);
  monitor_.join();
  // The child is gone, so its end of the pipe is closed and the forwarder sees EOF.
  if (forwarder_.joinable()) forwarder_.join();
  close(stdout_fd_);
  if (step_fd_ >= 0) close(step_fd_);
  if (pidfd_ >= 0) close(pidfd_);
  if (!socket_dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(socket_dir_, ignored);
  }
}

absl::Status WorkerProcess::ReadEndpoint(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string pending;
  while (true) {
    // Handle every complete line read so far.
    size_t newline;
    while ((newline = pending.find('\n')) != std::string::npos) {
      absl::string_view line(pending.data(), newline);
      int port = 0;
      if (absl::ConsumePrefix(&line, kListeningPrefix) &&
          (absl::StartsWith(line, "unix:") || (absl::SimpleAtoi(line, &port) && port > 0))) {
        address_ = port > 0 ? absl::StrCat("127.0.0.1:", port) : std::string(line);
        stdout_buffer_ = pending.substr(newline + 1);
        return absl::OkStatus();
      }
      WriteAllToStderr(absl::string_view(pending.data(), newline + 1));
      pending.erase(0, newline + 1);
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::UnavailableError(absl::StrCat("worker rank ", rank_, " (pid ", pid_,
                                                 ") did not report its port within ",
                                                 absl::FormatDuration(timeout)));
    }
    pollfd readable = {stdout_fd_, POLLIN, 0};
    const int ready = poll(&readable, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (ready < 0 && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("poll: ", strerror(errno)));
    }
    if (ready <= 0) continue;
    char buffer[4096];
    const ssize_t got = read(stdout_fd_, buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      // EOF: the worker closed stdout, which means it is exiting.
      WaitForExit(absl::Seconds(1));
      return absl::UnavailableError(absl::StrCat("worker rank ", rank_, " (pid ", pid_,
                                                 ") ended before listening (see its log above)"));
    }
    pending.append(buffer, static_cast<size_t>(got));
  }
}

void WorkerProcess::ForwardStdout() {
  WriteAllToStderr(stdout_buffer_);
  char buffer[4096];
  while (true) {
    const ssize_t got = read(stdout_fd_, buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return;
    WriteAllToStderr(absl::string_view(buffer, static_cast<size_t>(got)));
  }
}

void WorkerProcess::Monitor() {
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0) {
    if (errno != EINTR) {
      LOG(ERROR) << "waitpid(" << pid_ << "): " << strerror(errno);
      status = 0;
      break;
    }
  }
  // The callback runs before the exit is published, so whoever sees Exited()
  // (or returns from Terminate) knows the owner has already been told.
  if (on_exit_) on_exit_(DescribeWaitStatus(status));
  absl::MutexLock lock(&mutex_);
  exited_ = true;
}

bool WorkerProcess::Exited() {
  absl::MutexLock lock(&mutex_);
  return exited_;
}

bool WorkerProcess::WaitForExit(absl::Duration timeout) {
  absl::MutexLock lock(&mutex_);
  return mutex_.AwaitWithTimeout(absl::Condition(&exited_), timeout);
}

void WorkerProcess::Signal(int signal) {
  absl::MutexLock lock(&mutex_);
  if (exited_) return;
  // A pidfd names this child even after it is reaped, so a recycled pid is
  // never hit; kill() is the fallback for kernels without pidfds.
  if (pidfd_ >= 0) {
    syscall(SYS_pidfd_send_signal, pidfd_, signal, nullptr, 0);
  } else {
    kill(pid_, signal);
  }
}

void WorkerProcess::Terminate(absl::Duration grace) {
  if (Exited()) return;
  Signal(SIGTERM);
  if (WaitForExit(grace)) return;
  LOG(WARNING) << "worker rank " << rank_ << " (pid " << pid_ << ") ignored SIGTERM; killing it";
  Signal(SIGKILL);
  WaitForExit(absl::InfiniteDuration());
}

}  // namespace pagoda::scheduler
