// pagoda-worker's configuration rules: the ranges of its numeric flags (in
// the server's words, common/flag_checks.h), the secret it must be given, and
// the hosts that default to --listen's.

#include "worker/worker_config.h"

#include <arpa/inet.h>

#include "absl/strings/str_cat.h"
#include "common/flag_checks.h"

namespace pagoda::worker {
namespace {

using flag_check::FirstError;
using flag_check::Port;
using flag_check::Range;
using flag_check::RealRange;

// Linux's PID_MAX_LIMIT: no process id is larger.
constexpr int kMaxPid = 1 << 22;
// Linux's default nr_open: no inherited descriptor is larger.
constexpr int kMaxFd = 1 << 20;
// More CUDA devices than any host has.
constexpr int kMaxCudaDevice = 1023;

absl::Status CheckRanges(const WorkerConfig& config) {
  return FirstError({
      Range("rank", config.rank, 0, wire::kMaxWorldSize - 1),
      Range("cuda-device", config.cuda_device, -1, kMaxCudaDevice),
      Range("max-message-bytes", config.max_message_bytes, wire::kMinWorkerReceiveLimitBytes,
            wire::kMaxWorkerMessageBytes),
      RealRange("owner-timeout", config.owner_timeout, 1, 86400, true),
      Range("secret-fd", config.secret_fd, -1, kMaxFd),
      Range("parent-pid", config.parent_pid, 0, kMaxPid),
      Range("step-fd", config.step_fd, -1, kMaxFd),
      Port("metrics-port", config.metrics_port, -1, "0 (off), -1 (the OS picks)"),
  });
}

// The host part of --listen: loopback for a unix: socket.
std::string ListenHost(const std::string& listen) {
  if (listen.rfind("unix:", 0) == 0) return "127.0.0.1";
  return listen.substr(0, listen.rfind(':'));
}

bool IsIpv4(const std::string& host) {
  in_addr address;
  return inet_pton(AF_INET, host.c_str(), &address) == 1;
}

}  // namespace

absl::Status CheckAndResolveWorkerConfig(WorkerConfig* config) {
  if (absl::Status ranges = CheckRanges(*config); !ranges.ok()) return ranges;
  if (config->secret_fd < 0 && config->secret_file.empty()) {
    return absl::InvalidArgumentError(
        "a worker needs the server's secret: pass --secret-fd or --secret-file");
  }
  const std::string listen_host = ListenHost(config->listen);
  if (config->collective_host.empty()) {
    // Peers on other hosts reach the worker where it serves; a wildcard or a
    // name is no address to give them, so loopback then.
    const bool usable = listen_host != "0.0.0.0" && IsIpv4(listen_host);
    config->collective_host = usable ? listen_host : "127.0.0.1";
  }
  if (!IsIpv4(config->collective_host)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--collective-host must be an IPv4 address, got '", config->collective_host, "'"));
  }
  if (config->metrics_host.empty()) config->metrics_host = listen_host;
  return absl::OkStatus();
}

}  // namespace pagoda::worker
