#ifndef PAGODA_WORKER_WORKER_CONFIG_H_
#define PAGODA_WORKER_WORKER_CONFIG_H_

// pagoda-worker's configuration: built once from the command line
// (worker/worker_flags.h), every range and cross-flag rule checked here before
// the worker reads its secret or listens, then read by the worker process
// alone. Nothing else under worker/ reads a flag: everything about the model
// comes from the server's LoadModel call, not from here.

#include <string>

#include "absl/status/status.h"
#include "common/tls_credentials.h"
#include "wire/limits.h"

namespace pagoda::worker {

struct WorkerConfig {
  // Serving: where, as which rank, and how large a call may be.
  std::string listen = "127.0.0.1:0";  // HOST:PORT (port 0: the OS picks) or unix:PATH.
  int rank = 0;
  int cuda_device = -1;  // -1: the rank's (rank r runs on the r-th visible GPU).
  int max_message_bytes = wire::kMaxWorkerMessageBytes;
  double owner_timeout = 30;  // Seconds the owning server may stay silent.

  // The server that owns this worker: its secret, its process, its channel.
  int secret_fd = -1;       // Inherited pipe holding the secret; -1: none.
  std::string secret_file;  // Else a file holding it.
  int parent_pid = 0;       // 0: none; else exit when that process is gone.
  int step_fd = -1;         // Inherited step-channel socket; -1: none.

  // Mutual TLS with the server (connected workers beyond loopback).
  TlsFiles tls;

  // Tensor-parallel (CPU collective) connections listen here: an IPv4
  // address. Resolved from listen when not given.
  std::string collective_host;

  // Prometheus /metrics: 0 = off, -1 = the OS picks; on metrics_host,
  // resolved from listen when not given.
  int metrics_port = 0;
  std::string metrics_host;
};

// Checks every range and cross-flag rule, then fills the defaults that
// depend on --listen (collective_host, metrics_host). INVALID_ARGUMENT with
// one line naming the flag, its value and what is allowed.
absl::Status CheckAndResolveWorkerConfig(WorkerConfig* config);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_WORKER_CONFIG_H_
