// pagoda-worker's process, from its command line to its exit (its main() is
// worker/worker_main.cc; a test build has its own, with other runner hooks):
// one rank's model shard and KV cache behind the
// pagoda.worker.v1.Worker gRPC service. Everything about the model it learns
// from the server's LoadModel call; the command line only says where to listen.
//
// It listens on exactly one endpoint: --listen, a TCP address or, as the
// server spawns it, "unix:PATH" in a directory only the server's user can
// open. Every Worker call must carry the server's secret (see
// common/worker_secret.h), read at start from an inherited pipe (--secret-fd,
// so it is never in argv or the environment, which /proc shows) or from a
// file (--secret-file, a mounted Kubernetes Secret). Connected workers should
// also take --ssl-certfile/--ssl-keyfile/--ssl-ca-certs: mutual TLS with the
// server. It serves no reflection:
// the binary does not link gRPC's reflection library, whose mere loading
// would turn reflection on for every server.
//
// A server that spawns its worker also hands it a step channel (--step-fd):
// an inherited socket carrying step plans and replies as frames, the fast
// path of a one-rank group (worker/step_channel_server.h).
//
// After binding it prints exactly one line "PAGODA_WORKER_LISTENING <port>"
// (or "PAGODA_WORKER_LISTENING unix:PATH") to stdout so a launcher that asked
// for port 0 learns the port. It exits 0 after
// a Shutdown RPC, SIGTERM or SIGINT, and also when --parent-pid is given and
// that process is gone (so an orphaned worker never lingers).

#include "worker/worker_process.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/flags.h"
#include "common/protobuf_log.h"
#include "common/tls_credentials.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "wire/limits.h"
#include "wire/worker_secret.h"
#include "wire/worker_transport.h"
#include "worker/cpu/cpu_model_runner.h"
#include "worker/model_runner.h"
#include "worker/runner_factory.h"
#include "worker/secret_auth_processor.h"
#include "worker/step_channel_server.h"
#include "worker/worker_config.h"
#include "worker/worker_flags.h"
#include "worker/worker_metrics.h"
#include "worker/worker_service.h"

namespace {

// How long in-flight calls get to finish once the worker decides to stop, and
// how long after that the process may take before it is forced out.
constexpr absl::Duration kDrainGrace = absl::Seconds(2);
constexpr absl::Duration kForcedExitAfter = absl::Seconds(10);
// How often the watcher thread looks for signals and for the parent's death.
constexpr absl::Duration kWatchPeriod = absl::Milliseconds(100);

// The first reason to stop wins; later ones are ignored.
class StopRequest {
 public:
  void Request(std::string reason) {
    absl::MutexLock lock(&mutex_);
    if (!reason_.empty()) return;
    reason_ = std::move(reason);
  }
  bool requested() {
    absl::MutexLock lock(&mutex_);
    return !reason_.empty();
  }
  // Blocks until Request was called; returns its reason.
  std::string Wait() {
    absl::MutexLock lock(&mutex_);
    mutex_.Await(absl::Condition(
        +[](std::string* reason) { return !reason->empty(); }, &reason_));
    return reason_;
  }

 private:
  absl::Mutex mutex_;
  std::string reason_ ABSL_GUARDED_BY(mutex_);
};

// The server's secret, from --secret-fd or else --secret-file (the config
// requires one of them).
absl::StatusOr<std::string> ReadSecret(const pagoda::worker::WorkerConfig& config) {
  if (config.secret_fd >= 0) return pagoda::ReadWorkerSecretFromFd(config.secret_fd);
  return pagoda::ReadWorkerSecretFile(config.secret_file);
}

// SIGTERM/SIGINT may land on any thread (libraries such as gRPC start
// threads before main), so the handler only writes the signal number to a pipe
// that the watcher reads: write() is async-signal-safe.
int signal_pipe[2] = {-1, -1};

extern "C" void OnStopSignal(int signal) {
  const int saved_errno = errno;
  const char byte = static_cast<char>(signal);
  [[maybe_unused]] ssize_t ignored = write(signal_pipe[1], &byte, 1);
  errno = saved_errno;
}

bool InstallStopSignalHandlers() {
  if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return false;
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  if (sigaction(SIGTERM, &action, nullptr) != 0 || sigaction(SIGINT, &action, nullptr) != 0) {
    return false;
  }
  // The signal mask survives exec: a parent that blocks these signals (as
  // pagoda-server does, to sigwait() for them) would otherwise leave the
  // handler unreachable. Threads started from here on inherit this mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  return pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr) == 0;
}

// Waits for a stop signal and for the parent's death, until `stop` is
// requested by anyone.
void WatchSignalsAndParent(pid_t parent_pid, StopRequest& stop) {
  while (!stop.requested()) {
    pollfd readable = {signal_pipe[0], POLLIN, 0};
    char signal = 0;
    if (poll(&readable, 1, static_cast<int>(absl::ToInt64Milliseconds(kWatchPeriod))) > 0 &&
        read(signal_pipe[0], &signal, 1) == 1) {
      stop.Request(absl::StrCat("received signal ", strsignal(signal)));
    } else if (parent_pid > 0 && getppid() != parent_pid) {
      // Re-parented: the server that spawned us is gone.
      stop.Request(absl::StrCat("parent process ", parent_pid, " exited"));
    }
  }
}

// The step channel on --step-fd; null when the flag is not given.
absl::StatusOr<std::unique_ptr<pagoda::worker::StepChannelServer>> OpenStepChannel(
    int fd, pagoda::worker::WorkerService* service) {
  if (fd < 0) return std::unique_ptr<pagoda::worker::StepChannelServer>();
  struct stat info;
  if (fstat(fd, &info) != 0 || !S_ISSOCK(info.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("--step-fd ", fd, " is not an open socket"));
  }
  return std::make_unique<pagoda::worker::StepChannelServer>(fd, service);
}

// A started gRPC server and what the worker prints as its endpoint: the
// port, or the unix: address as given.
struct ListeningServer {
  std::unique_ptr<grpc::Server> server;
  std::string endpoint;
};

// The local credentials of an address that has them (wire/worker_transport.h);
// null for a network address.
std::shared_ptr<grpc::ServerCredentials> LocalCredentialsOf(
    pagoda::wire::WorkerTransport transport) {
  switch (transport) {
    case pagoda::wire::WorkerTransport::kUnixSocket:
      return grpc::experimental::LocalServerCredentials(UDS);
    case pagoda::wire::WorkerTransport::kLoopbackTcp:
      return grpc::experimental::LocalServerCredentials(LOCAL_TCP);
    case pagoda::wire::WorkerTransport::kNetworkTcp:
      return nullptr;
  }
  return nullptr;
}

// The credentials of --listen: TLS when the config gives it; else, on a unix
// socket (the server's own spawned worker) or a loopback TCP address
// (127.0.0.1, [::1], localhost: a worker on its server's host), local
// credentials. On all of them gRPC runs an auth processor, which checks the
// secret before a call's message is read, so a caller without it costs its
// headers only. Plaintext TCP on any other address has no such hook: there
// the handlers check the secret after the whole message has arrived, so the
// warning.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ListenCredentials(
    pagoda::worker::WorkerService* service, const pagoda::TlsFiles& tls,
    const std::string& listen) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      pagoda::MakeServerCredentials(tls);
  if (!credentials.ok()) return credentials.status();
  std::shared_ptr<grpc::ServerCredentials> chosen =
      tls.given() ? *std::move(credentials)
                  : LocalCredentialsOf(pagoda::wire::WorkerTransportOf(listen));
  if (chosen == nullptr) {
    LOG(WARNING) << "--listen " << listen << ": plaintext TCP on an address other than "
                 << "127.0.0.1, [::1] or localhost, so a call's secret is checked only after "
                 << "its whole message is read and calls without it can hold unbounded memory "
                 << "(--max-message-bytes bounds one message, not the transport). Serve such "
                 << "workers over TLS (--ssl-certfile, --ssl-keyfile, --ssl-ca-certs), or listen "
                 << "on 127.0.0.1 or a unix: socket.";
    return *std::move(credentials);
  }
  chosen->SetAuthMetadataProcessor(std::make_shared<pagoda::worker::SecretAuthProcessor>(service));
  return chosen;
}

// Serves `service` (and gRPC health) on --listen.
absl::StatusOr<ListeningServer> StartServer(pagoda::worker::WorkerService* service,
                                            const pagoda::worker::WorkerConfig& config) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  const std::string& listen = config.listen;
  const bool unix_socket =
      pagoda::wire::WorkerTransportOf(listen) == pagoda::wire::WorkerTransport::kUnixSocket;
  // Connected workers: mutual TLS, so only a server holding a certificate
  // from the CA gets as far as presenting the secret.
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      ListenCredentials(service, config.tls, listen);
  if (!credentials.ok()) return credentials.status();
  builder.AddListeningPort(listen, *credentials, &port);
  // gRPC sets SO_REUSEPORT by default, which lets a second process share a
  // busy port and steal half its calls: fail instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // The server pings every connection twice a second, calls or not, to see
  // a lost worker while idle; gRPC's default would answer such pings with
  // GOAWAY "too_many_pings" and drop the connection.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 100);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // Step plans and results grow with the batch; gRPC's 4 MiB default is too
  // small, no bound at all too trusting. gRPC refuses a larger message
  // (RESOURCE_EXHAUSTED) before the handler sees it. It does NOT bound the
  // transport's memory: on plaintext network TCP (no auth processor) 16
  // concurrent 100 MB calls still grew a worker by 1.2 GB with a 4 MiB limit
  // (integration_security_test); only the auth processor (unix socket,
  // loopback TCP, TLS) refuses such calls for the cost of their headers.
  builder.SetMaxReceiveMessageSize(config.max_message_bytes);
  builder.SetMaxSendMessageSize(pagoda::wire::kMaxWorkerMessageBytes);
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || (!unix_socket && port == 0)) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", listen, " (address in use or not valid)"));
  }
  return ListeningServer{.server = std::move(server),
                         .endpoint = unix_socket ? listen : absl::StrCat(port)};
}

// The /metrics endpoint, or null when --metrics-port is 0.
absl::StatusOr<std::unique_ptr<pagoda::worker::WorkerMetrics>> StartMetrics(
    const pagoda::worker::WorkerService& service, const pagoda::worker::WorkerConfig& config) {
  if (config.metrics_port == 0) return std::unique_ptr<pagoda::worker::WorkerMetrics>();
  absl::StatusOr<std::unique_ptr<pagoda::worker::WorkerMetrics>> metrics =
      pagoda::worker::WorkerMetrics::Start(
          config.metrics_host, std::max(config.metrics_port, 0), config.rank, [&service] {
            return pagoda::worker::WorkerCounts{.refused_calls = service.refused_calls(),
                                                .idle_between_steps = service.idle_between_steps()};
          });
  if (metrics.ok()) LOG(INFO) << "metrics on " << config.metrics_host << ":" << (*metrics)->port();
  return metrics;
}

// Drains and stops everything that serves, within kDrainGrace, and makes
// sure the process is gone kForcedExitAfter from now whatever happens.
void StopServing(pagoda::worker::WorkerService& service,
                 pagoda::worker::StepChannelServer* step_channel, grpc::Server& server) {
  // A step stuck in a long computation must not keep an orphan alive.
  std::thread([] {
    absl::SleepFor(kForcedExitAfter);
    LOG(ERROR) << "did not stop in time; exiting";
    std::_Exit(1);
  }).detach();
  // A step waiting in a collective on peers that are stopping too would hold
  // the drain until its timeout: fail it now.
  service.AbortCollectives();
  if (step_channel != nullptr) step_channel->Stop();
  server.Shutdown(std::chrono::system_clock::now() + absl::ToChronoSeconds(kDrainGrace));
  server.Wait();
}

// Flags and logging.
void InitProcess(int argc, char** argv) {
  pagoda::ParsePagodaCommandLine(
      argc, argv,
      {"pagoda-worker", "pagoda-worker [--listen HOST:PORT] [--rank R]: one model shard",
       pagoda::worker::WorkerFlagGroups()});
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  pagoda::LimitProtobufLogging();
}

}  // namespace

namespace pagoda::worker {

int RunWorkerProcess(int argc, char** argv, const RunnerHooks& hooks) {
  InitProcess(argc, argv);
  absl::StatusOr<WorkerConfig> config = WorkerConfigFromFlags();
  if (!config.ok()) {
    std::cerr << "pagoda-worker: " << config.status().message() << std::endl;
    return 1;
  }
  const int rank = config->rank;
  const pid_t parent_pid = config->parent_pid;
  if (parent_pid > 0 && getppid() != parent_pid) {
    LOG(ERROR) << "parent process " << parent_pid << " is already gone";
    return 1;
  }
  absl::StatusOr<std::string> secret = ReadSecret(*config);
  if (!secret.ok()) {
    LOG(ERROR) << secret.status().message();
    return 1;
  }
  if (!InstallStopSignalHandlers()) {
    PLOG(ERROR) << "cannot install signal handlers";
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  StopRequest stop;
  CpuModelRunnerOptions runner_options;
  runner_options.collective_host = config->collective_host;
  WorkerService service(
      rank, *std::move(secret),
      [&](const std::string& device) {
        return MakeModelRunner(device, config->cuda_device, runner_options, hooks, rank);
      },
      [&stop] { stop.Request("Shutdown RPC"); }, absl::Seconds(config->owner_timeout),
      config->max_message_bytes);
  auto step_channel = OpenStepChannel(config->step_fd, &service);
  if (!step_channel.ok()) {
    LOG(ERROR) << step_channel.status().message();
    return 1;
  }
  absl::StatusOr<ListeningServer> listening = StartServer(&service, *config);
  if (!listening.ok()) {
    LOG(ERROR) << listening.status().message();
    return 1;
  }
  absl::StatusOr<std::unique_ptr<WorkerMetrics>> metrics = StartMetrics(service, *config);
  if (!metrics.ok()) {
    LOG(ERROR) << metrics.status().message();
    return 1;
  }
  std::printf("PAGODA_WORKER_LISTENING %s\n", listening->endpoint.c_str());
  std::fflush(stdout);
  LOG(INFO) << "pagoda-worker rank " << rank << " listening on " << listening->endpoint;

  std::thread watcher(WatchSignalsAndParent, parent_pid, std::ref(stop));
  const std::string reason = stop.Wait();
  LOG(INFO) << "rank " << rank << " stopping: " << reason;
  StopServing(service, step_channel->get(), *listening->server);
  watcher.join();
  LOG(INFO) << "rank " << rank << " stopped";
  return 0;
}

}  // namespace pagoda::worker
