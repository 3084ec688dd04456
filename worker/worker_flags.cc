// pagoda-worker's command line: every flag it takes, defined here and read
// here once, into a WorkerConfig (worker_config.h). The defaults are the
// config's own where it has one, so a flag and its field cannot disagree.

#include "worker/worker_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "wire/limits.h"

// Serving.
ABSL_FLAG(std::string, listen, pagoda::worker::WorkerConfig().listen,
          "Address to serve on; port 0 = the OS picks one.");
ABSL_FLAG(int, rank, 0, "Tensor-parallel rank of this worker.");
ABSL_FLAG(int, cuda_device, -1,
          "With --device cuda: the CUDA device index (among CUDA_VISIBLE_DEVICES) to run "
          "on; -1 = the rank's (rank r uses the r-th visible GPU).");
ABSL_FLAG(int, max_message_bytes, pagoda::wire::kMaxWorkerMessageBytes,
          "Largest gRPC message this worker accepts (1 MiB to 256 MiB); larger calls are "
          "RESOURCE_EXHAUSTED. The server logs its largest step plan at start-up ('largest "
          "step plan: N bytes'), passes it to the workers it spawns, and refuses to start "
          "with a worker whose limit is below it. Workers beyond loopback should use TLS: on "
          "plaintext TCP to a non-loopback address a call's secret is checked only after its "
          "bytes arrive.");
ABSL_FLAG(double, owner_timeout, pagoda::worker::WorkerConfig().owner_timeout,
          "Seconds the server that owns this worker (the first to load a model on it) may stay "
          "silent, heartbeats included, before another server may take it over.");

// The owning server: secret, process, step channel.
ABSL_FLAG(int, secret_fd, -1, "Inherited fd to read the server's secret from (then closed).");
ABSL_FLAG(std::string, secret_file, "", "File holding the server's secret (if no --secret-fd).");
ABSL_FLAG(int, parent_pid, 0, "If set, exit when this process (the server) dies.");
ABSL_FLAG(int, step_fd, -1,
          "Inherited socket the spawning server sends step plans on (its step channel); "
          "ExecuteStep over gRPC keeps working beside it.");

// TLS with the server.
ABSL_FLAG(std::string, ssl_certfile, "",
          "PEM certificate: serve over TLS (connected workers beyond loopback), where a call's "
          "secret is checked from its headers before its message is read.");
ABSL_FLAG(std::string, ssl_keyfile, "",
          "PEM private key of --ssl-certfile; readable by its owner only (chmod 600).");
ABSL_FLAG(std::string, ssl_ca_certs, "",
          "PEM CA bundle: the server must present a client certificate it signed.");

// Tensor parallel.
ABSL_FLAG(
    std::string, collective_host, "",
    "IPv4 address this worker's tensor-parallel (CPU collective) connections listen on; its peers "
    "must reach it. Default: the host of --listen when that is an IPv4 address other "
    "than 0.0.0.0, else 127.0.0.1.");

// Metrics.
ABSL_FLAG(int, metrics_port, 0,
          "Prometheus /metrics port (refused calls; docs/metrics.md), on the host of --listen "
          "(127.0.0.1 for unix:) unless --metrics-host says otherwise; 0 = off, -1 = the OS "
          "picks one.");
ABSL_FLAG(std::string, metrics_host, "",
          "IPv4 address to serve --metrics-port on, e.g. 0.0.0.0 for a Prometheus on another "
          "host while --listen stays on loopback; default: the host of --listen (127.0.0.1 "
          "for unix:).");

namespace pagoda::worker {

absl::StatusOr<WorkerConfig> WorkerConfigFromFlags() {
  WorkerConfig config;
  config.listen = absl::GetFlag(FLAGS_listen);
  config.rank = absl::GetFlag(FLAGS_rank);
  config.cuda_device = absl::GetFlag(FLAGS_cuda_device);
  config.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  config.owner_timeout = absl::GetFlag(FLAGS_owner_timeout);
  config.secret_fd = absl::GetFlag(FLAGS_secret_fd);
  config.secret_file = absl::GetFlag(FLAGS_secret_file);
  config.parent_pid = absl::GetFlag(FLAGS_parent_pid);
  config.step_fd = absl::GetFlag(FLAGS_step_fd);
  config.tls = TlsFiles{absl::GetFlag(FLAGS_ssl_certfile), absl::GetFlag(FLAGS_ssl_keyfile),
                        absl::GetFlag(FLAGS_ssl_ca_certs)};
  config.collective_host = absl::GetFlag(FLAGS_collective_host);
  config.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  config.metrics_host = absl::GetFlag(FLAGS_metrics_host);
  if (absl::Status status = CheckAndResolveWorkerConfig(&config); !status.ok()) return status;
  return config;
}

std::vector<FlagGroup> WorkerFlagGroups() {
  return {
      {"Serving", {"listen", "rank", "cuda_device", "max_message_bytes", "owner_timeout"}},
      {"The owning server: secret, process, step channel",
       {"secret_fd", "secret_file", "parent_pid", "step_fd"}},
      {"TLS with the server", {"ssl_certfile", "ssl_keyfile", "ssl_ca_certs"}},
      {"Tensor parallel", {"collective_host"}},
      {"Metrics", {"metrics_port", "metrics_host"}},
  };
}

}  // namespace pagoda::worker
