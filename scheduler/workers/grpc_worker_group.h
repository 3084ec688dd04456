#ifndef PAGODA_SCHEDULER_WORKERS_GRPC_WORKER_GROUP_H_
#define PAGODA_SCHEDULER_WORKERS_GRPC_WORKER_GROUP_H_

// GrpcWorkerGroup: the WorkerGroup over pagoda-worker processes (spawned or
// connected), with its deadlines, restarts and step channel.

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "pagoda/worker/v1/worker.grpc.pb.h"
#include "scheduler/workers/worker_group.h"
#include "scheduler/workers/worker_launcher.h"
#include "wire/limits.h"
#include "wire/rendezvous_store_server.h"

namespace pagoda::scheduler {

// Deadlines of the calls a GrpcWorkerGroup makes, per call (all ranks at once).
struct GrpcWorkerGroupOptions {
  absl::Duration load_model_timeout = absl::Minutes(10);  // Weights + profiling.
  absl::Duration init_cache_timeout = absl::Minutes(2);   // Allocating KV blocks.
  absl::Duration step_timeout = absl::Seconds(60);
  absl::Duration lora_load_timeout = absl::Minutes(2);  // Reading an adapter.
  // How long Shutdown waits for workers to exit by themselves before it
  // terminates spawned ones (SIGTERM, then SIGKILL after the same grace).
  absl::Duration shutdown_grace = absl::Seconds(3);
  // Recover gives up for good once this many restart attempts (successful or
  // not) fell within restart_window, or this many failed in a row however
  // long they took (connected workers that never come back): a worker that
  // keeps dying is a fault to report, not to hide.
  int max_restarts = 5;
  absl::Duration restart_window = absl::Seconds(60);
  // Wait before a restart attempt after a failed one: doubles from the first
  // to the most.
  absl::Duration first_restart_backoff = absl::Milliseconds(100);
  absl::Duration max_restart_backoff = absl::Seconds(2);
  // How long one restart attempt may take to start (spawned) or reach
  // (connected) every rank.
  absl::Duration restart_start_timeout = absl::Seconds(30);
  // How long a worker may leave the server's HTTP/2 keepalive pings
  // unanswered (stopped, swapped out, a host gone silent) before it counts as
  // lost, idle or not: the pings go out after a second without traffic
  // (less for a stall timeout under two seconds) and wait the rest. Too short
  // restarts healthy workers on a busy host; a worker process that exits is
  // seen at once either way (closed connection, and pidfd when spawned).
  absl::Duration stall_timeout = absl::Seconds(10);
  // Connected workers: TLS credentials to reach them with (mutual TLS in
  // production, see MakeChannelCredentials), or null: each worker is then
  // reached as it serves without TLS (wire/worker_transport.h): local
  // credentials on a unix socket or loopback TCP, plaintext beyond. Spawned
  // workers serve their private unix sockets with local credentials.
  std::shared_ptr<grpc::ChannelCredentials> connect_credentials;
  // With connect_credentials: the name every worker's certificate must
  // carry, checked instead of the dialled host (a pod IP or DNS name), so
  // one certificate serves every worker; empty: the dialled host.
  std::string tls_server_name;
  // The largest step plan this server can send (MaxStepPlanBytes): spawned
  // workers get it as their receive limit (--max-message-bytes), and
  // LoadModel refuses, naming both numbers, a worker whose reported limit is
  // below it. In [wire::kMinWorkerReceiveLimitBytes,
  // wire::kMaxWorkerMessageBytes].
  int worker_receive_limit_bytes = wire::kMaxWorkerMessageBytes;
  // Tensor parallelism (more than one rank): the group runs a rendezvous
  // store (worker/comm/rendezvous_store_server.h) on this IPv4 address and
  // port (0: any free port), a fresh one with a fresh secret for each
  // LoadModel, and hands its address, secret and key prefix to every rank. Every rank must reach
  // it: loopback for spawned workers, an address of this host for connected ones.
  std::string rendezvous_host = "127.0.0.1";
  int rendezvous_port = 0;
  // Bounds the ranks' joining of their group and each of their collectives.
  absl::Duration collective_timeout = absl::Seconds(30);
};

// The WorkerGroup over gRPC: one channel per rank; every call goes to all
// ranks in parallel (async stubs) under the call's deadline.
//
// Errors: when every rank rejects a call with the same request-level code
// (INVALID_ARGUMENT, FAILED_PRECONDITION, NOT_FOUND, OUT_OF_RANGE,
// RESOURCE_EXHAUSTED, UNIMPLEMENTED, ...), that status is returned and the
// group stays healthy: the workers agree and their state is unchanged. Any
// other failure (transport error, deadline, a worker process exiting, ranks
// disagreeing) makes the group unhealthy until Recover() succeeds: the call
// and every later one return UNAVAILABLE naming the rank. Liveness does not
// wait for a call: for spawned workers a monitor thread notices a dead child
// at once (pidfd), for every rank a watcher sees its connection drop (closed,
// or keepalive pings unanswered), and either cancels the calls in flight.
//
// Every call carries the rank's secret (common/worker_secret.h).
//
// Thread-compatible like WorkerGroup (one caller at a time), except Healthy(),
// failure(), restarts() and worker_pids(), which any thread may call.
class GrpcWorkerGroup final : public WorkerGroup {
 public:
  // See ConnectWorkers / LaunchLocalWorkers in worker_group.h.
  static absl::StatusOr<std::unique_ptr<GrpcWorkerGroup>> Connect(
      const std::vector<std::string>& addresses, const std::string& secret,
      absl::Duration connect_timeout, const GrpcWorkerGroupOptions& options = {});
  static absl::StatusOr<std::unique_ptr<GrpcWorkerGroup>> Launch(
      const std::string& worker_binary, int world_size, absl::Duration start_timeout,
      const GrpcWorkerGroupOptions& options = {});

  GrpcWorkerGroup(const GrpcWorkerGroup&) = delete;
  GrpcWorkerGroup& operator=(const GrpcWorkerGroup&) = delete;
  // Calls Shutdown.
  ~GrpcWorkerGroup() override;

  // Sends each rank `request` with its own rank and world_size filled in,
  // and for more than one rank the rendezvous of a fresh group (a new key
  // prefix each call, so a reloaded or restarted group never meets the keys
  // of an earlier one).
  absl::StatusOr<pagoda::worker::v1::LoadModelResponse> LoadModel(
      const pagoda::worker::v1::LoadModelRequest& request) override;
  absl::Status InitCache(const pagoda::worker::v1::InitCacheRequest& request) override;
  // The plan goes to every rank; then, if it promises token masks, `masks`
  // runs here while the ranks compute, and its StepMasks goes to every rank
  // (SendStepMasks, or a second frame on the step channel).
  absl::StatusOr<pagoda::worker::v1::StepResult> ExecuteStep(
      const pagoda::worker::v1::StepPlan& plan, const StepMaskSource& masks) override;
  using WorkerGroup::ExecuteStep;
  // A spawned group (any number of ranks) pipelines its steps on its
  // ranks' step channels: each rank gets step N + 1 while N runs, and every
  // rank answers each step (rank 0 with the tokens).
  bool SupportsPipelinedSteps() const override { return !StepChannelFds().empty(); }
  absl::Status SendStep(const pagoda::worker::v1::StepPlan& plan,
                        const StepMaskSource& masks) override;
  absl::StatusOr<pagoda::worker::v1::StepResult> ReceiveStep() override;
  absl::StatusOr<pagoda::worker::v1::LoadLoraAdapterResponse> LoadLoraAdapter(
      const pagoda::worker::v1::LoadLoraAdapterRequest& request) override;
  absl::Status UnloadLoraAdapter(
      const pagoda::worker::v1::UnloadLoraAdapterRequest& request) override;
  bool Healthy() const override { return healthy_.load() && ready_.load(); }
  int world_size() const override { return world_size_; }
  // Restarts spawned workers (every rank: the group is one tensor-parallel
  // unit) or reconnects to connected ones when they are back, with backoff,
  // then replays the last LoadModel and InitCache. Gives up (for good: later
  // calls fail at once) after options.max_restarts attempts within
  // options.restart_window or options.max_restarts failed ones in a row.
  absl::Status Recover() override;
  // Whether Recover gave up for good; failure() then says why. Any thread:
  // the server's main thread watches it to exit, so that whatever supervises
  // the server (Kubernetes) starts it afresh.
  bool given_up() const { return given_up_.load(); }
  // Idempotent. Afterwards every call returns UNAVAILABLE.
  void Shutdown() override;

  // Why the group is unhealthy ("" while healthy).
  std::string failure() const;
  // Successful recoveries so far.
  int restarts() const { return restarts_.load(); }
  // Process ids of spawned workers in rank order (empty for Connect).
  std::vector<pid_t> worker_pids() const;

 private:
  struct Rank {
    std::string address;
    std::string secret;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<pagoda::worker::v1::Worker::Stub> stub;
    std::unique_ptr<WorkerProcess> process;  // Null for connected workers.
  };

  GrpcWorkerGroup(const GrpcWorkerGroupOptions& options, int world_size, std::string owner_id);
  // A group with a fresh owner id (wire/worker_owner.h).
  static absl::StatusOr<std::unique_ptr<GrpcWorkerGroup>> Create(
      const GrpcWorkerGroupOptions& options, int world_size);
  // Starts every rank: spawns (worker_binary_ set) or connects (addresses_).
  absl::Status StartRanks(absl::Time deadline);
  // Opens a channel to `address` for rank ranks_.size() and waits until
  // `deadline` for it to connect.
  absl::Status AddRank(const std::string& address, const std::string& secret,
                       std::unique_ptr<WorkerProcess> process, absl::Time deadline);
  // Stops (spawned) or forgets (connected) every rank and its watcher.
  void DropRanks();
  // Fails the group when rank `rank`'s channel leaves READY; runs until
  // stop_watching_.
  // Until the watch stops: fails the group when the rank's connection
  // leaves READY, and sends the rank a Heartbeat every
  // wire::kOwnerHeartbeatPeriod, failing the group if the worker answers
  // that it serves another server.
  void WatchConnection(int rank, std::string address, std::string secret,
                       std::shared_ptr<grpc::Channel> channel);
  // FAILED_PRECONDITION if the worker now serves another server; OK for any
  // other outcome (liveness is judged elsewhere).
  absl::Status SendHeartbeat(pagoda::worker::v1::Worker::Stub& stub,
                             const std::string& secret) const;
  // Ends recovery for good: records why (`how` it ran out, the last error),
  // fails the group for good and returns UNAVAILABLE with the reason.
  absl::Status GiveUp(const std::string& how, const std::string& last_error);
  // One restart: new ranks, LoadModel, InitCache.
  absl::Status RestartOnce();
  void AddSecret(grpc::ClientContext& context, int rank) const;
  // Starts a fresh rendezvous store for a new group and fills `request`'s
  // rendezvous fields.
  absl::Status PrepareRendezvous(pagoda::worker::v1::LoadModelRequest& request);

  // Sends requests[r] to rank r, all ranks at once, through `method`: a
  // callable (Stub::async_interface*, ClientContext*, const Request*,
  // Response*, std::function<void(grpc::Status)>) that starts the async call.
  // Fills one response per rank; returns the group's verdict (see above).
  // `while_waiting`, if set, runs once every call has started.
  template <typename Request, typename Response, typename AsyncMethod>
  absl::Status CallAllRanks(const char* name, AsyncMethod method,
                            const std::vector<const Request*>& requests, absl::Duration timeout,
                            std::vector<Response>& responses,
                            const std::function<void()>& while_waiting = nullptr);
  // Sends the step's masks to every rank; the steps' own calls carry the
  // verdict (a rank that refuses the masks refuses its step too).
  void SendStepMasks(const pagoda::worker::v1::StepMasks& masks);
  // The verdict on one call's per-rank `statuses` (all ranks answered, the
  // group still healthy): OK if every rank succeeded; the shared error if all
  // failed alike, since the ranks stay in step; otherwise the ranks diverged,
  // so the group fails and the answer is UNAVAILABLE.
  absl::Status MergeRankStatuses(const char* name, const std::vector<grpc::Status>& statuses);

  // ExecuteStep of a one-rank group as a blocking call, which the calling
  // thread drives itself: no hand-off to gRPC's callback thread and back,
  // tens of microseconds of a step that may take two milliseconds. Same
  // verdicts as CallAllRanks.
  absl::StatusOr<pagoda::worker::v1::StepResult> ExecuteStepOnOneRank(
      const pagoda::worker::v1::StepPlan& plan);
  // The same over a spawned rank's step channel `fd`
  // (scheduler/workers/worker_launcher.h): one frame each way, no gRPC.
  // These and the pipelined steps are in grpc_worker_group_channel.cc.
  absl::StatusOr<pagoda::worker::v1::StepResult> ExecuteStepOverChannel(
      const pagoda::worker::v1::StepPlan& plan, const StepMaskSource& masks, int fd);
  // The step channel of a one-rank spawned group, or -1.
  int StepChannelFd() const;
  // Every rank's step channel, in rank order, for a spawned group; empty
  // when a rank has none (a connected group).
  std::vector<int> StepChannelFds() const;
  // Writes the step's frames on the channels `fds`: the plan to each, then,
  // if `masks` is set, its masks (computed once) to each.
  absl::Status WriteStepFrames(const pagoda::worker::v1::StepPlan& plan,
                               const StepMaskSource& masks, const std::vector<int>& fds);
  // Reads one reply frame from the channel `fd`.
  absl::Status ReadReplyFrame(int fd, std::string* frame);
  // The verdict on one step's reply frames, one per rank, read with
  // statuses `io`, as a gRPC call's: the group fails on a broken channel, a
  // worker-side failure or ranks that answered differently; otherwise rank
  // 0's answer (its result, or the request-level error every rank gave).
  absl::StatusOr<pagoda::worker::v1::StepResult> StepResultOfReplies(
      const std::vector<absl::Status>& io, const std::vector<std::string>& frames);

  // Marks the group unhealthy for `reason` (first reason wins) and cancels
  // every call in flight.
  void Fail(const std::string& reason);
  absl::Status UnavailableError();

  const GrpcWorkerGroupOptions options_;
  const int world_size_;
  // Sent with every call: the workers serve this server only.
  const std::string owner_id_;
  std::string worker_binary_;           // Spawned groups.
  std::vector<std::string> addresses_;  // Connected groups.
  std::string connect_secret_;          // Connected groups.
  // What Recover replays.
  std::optional<pagoda::worker::v1::LoadModelRequest> last_load_;
  std::optional<pagoda::worker::v1::InitCacheRequest> last_init_;
  std::vector<absl::Time> restart_attempts_;  // Within the window.
  std::string gave_up_;                       // Why Recover gave up for good.
  // Set once a factory finished: only a complete group asks its workers to
  // exit (a failed Connect must not stop workers it merely reached).
  bool complete_ = false;
  std::atomic<bool> healthy_{true};  // No failure since the ranks started.
  std::atomic<bool> ready_{true};    // False while Recover replays the model.
  std::atomic<int> restarts_{0};
  std::atomic<bool> given_up_{false};  // Set once gave_up_ is written.
  // Tensor-parallel groups: the store the current group met at, and how many
  // groups there have been (the key prefix of the next one).
  std::unique_ptr<pagoda::wire::RendezvousStoreServer> rendezvous_;
  std::string rendezvous_secret_;
  int rendezvous_generation_ = 0;

  mutable absl::Mutex mutex_;
  std::string failure_ ABSL_GUARDED_BY(mutex_);
  bool shutting_down_ ABSL_GUARDED_BY(mutex_) = false;
  bool stop_watching_ ABSL_GUARDED_BY(mutex_) = false;
  absl::flat_hash_set<grpc::ClientContext*> in_flight_ ABSL_GUARDED_BY(mutex_);

  std::vector<std::thread> watchers_;
  // Destroyed before the rest, so monitor threads (which call Fail) are
  // joined while the rest is still alive.
  std::vector<Rank> ranks_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_WORKERS_GRPC_WORKER_GROUP_H_
