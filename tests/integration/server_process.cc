#include "tests/integration/server_process.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace pagoda::testing {

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::string& binary, std::vector<std::string> args, absl::Duration timeout,
    const std::string& listening_marker) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return absl::InternalError("pipe failed");
  args.insert(args.begin(), binary);
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    dup2(pipe_fds[1], STDOUT_FILENO);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  std::unique_ptr<ServerProcess> server(new ServerProcess());
  server->pid_ = pid;
  server->stdout_fd_ = pipe_fds[0];
  const absl::Time deadline = absl::Now() + timeout;
  // Read lines until the listening line.
  while (server->port_ == 0) {
    const int wait_ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (wait_ms <= 0) return absl::DeadlineExceededError("server did not start listening");
    pollfd poll_fd{server->stdout_fd_, POLLIN, 0};
    if (poll(&poll_fd, 1, wait_ms) <= 0) continue;
    char buffer[1024];
    const ssize_t n = read(server->stdout_fd_, buffer, sizeof(buffer));
    if (n <= 0) {
      std::optional<int> code = server->WaitForExit(absl::Seconds(5));
      return absl::UnavailableError(
          absl::StrCat("server exited before listening, code ", code.value_or(-1)));
    }
    server->pending_.append(buffer, n);
    size_t newline;
    while ((newline = server->pending_.find('\n')) != std::string::npos) {
      const std::string line = server->pending_.substr(0, newline);
      server->pending_.erase(0, newline + 1);
      std::vector<std::string> words = absl::StrSplit(line, ' ');
      if (words.size() != 2) continue;
      if (words[0] == listening_marker) {
        (void)absl::SimpleAtoi(words[1], &server->port_);
      } else if (words[0] == "PAGODA_METRICS_LISTENING") {
        (void)absl::SimpleAtoi(words[1], &server->metrics_port_);
      } else if (words[0] == "PAGODA_WORKER_PIDS") {
        for (absl::string_view part : absl::StrSplit(words[1], ',')) {
          int worker;
          if (absl::SimpleAtoi(part, &worker)) server->worker_pids_.push_back(worker);
        }
      }
    }
  }
  server->reader_ = std::thread([raw = server.get()] { raw->ReadRest(); });
  return server;
}

void ServerProcess::ReadRest() {
  char buffer[4096];
  while (read(stdout_fd_, buffer, sizeof(buffer)) > 0) {
  }
}

ServerProcess::~ServerProcess() {
  if (!exit_code_.has_value()) {
    kill(pid_, SIGKILL);
    WaitForExit(absl::Seconds(10));
  }
  if (reader_.joinable()) reader_.join();
  close(stdout_fd_);
}

std::string ServerProcess::address() const { return absl::StrCat("127.0.0.1:", port_); }

void ServerProcess::Signal(int signal_number) {
  if (!exit_code_.has_value()) kill(pid_, signal_number);
}

std::optional<int> ServerProcess::WaitForExit(absl::Duration timeout) {
  if (exit_code_.has_value()) return exit_code_;
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    const pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    if (absl::Now() > deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(20));
  }
}

absl::StatusOr<std::string> RunCommand(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return absl::InternalError("popen failed");
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  const int status = pclose(pipe);
  if (status != 0) {
    return absl::InternalError(absl::StrCat("`", command, "` failed with status ", status));
  }
  return out;
}

absl::StatusOr<std::string> HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to port ", port));
  }
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::InternalError("short write");
  }
  std::string response;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) response.append(buffer, n);
  close(fd);
  return response;
}

}  // namespace pagoda::testing
