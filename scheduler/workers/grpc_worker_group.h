#ifndef PAGODA_SCHEDULER_WORKERS_GRPC_WORKER_GROUP_H_
#define PAGODA_SCHEDULER_WORKERS_GRPC_WORKER_GROUP_H_

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>
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

namespace pagoda::scheduler {

// Deadlines of the calls a GrpcWorkerGroup makes, per call (all ranks at once).
struct GrpcWorkerGroupOptions {
  absl::Duration load_model_timeout = absl::Minutes(10);  // Weights + profiling.
  absl::Duration init_cache_timeout = absl::Minutes(2);   // Allocating KV blocks.
  absl::Duration step_timeout = absl::Seconds(60);
  // How long Shutdown waits for workers to exit by themselves before it
  // terminates spawned ones (SIGTERM, then SIGKILL after the same grace).
  absl::Duration shutdown_grace = absl::Seconds(3);
};

// The WorkerGroup over gRPC: one channel per rank; every call goes to all
// ranks in parallel (async stubs) under the call's deadline.
//
// Errors: when every rank rejects a call with the same request-level code
// (INVALID_ARGUMENT, FAILED_PRECONDITION, NOT_FOUND, OUT_OF_RANGE,
// RESOURCE_EXHAUSTED, UNIMPLEMENTED, ...), that status is returned and the
// group stays healthy: the workers agree and their state is unchanged. Any
// other failure (transport error, deadline, a worker process exiting, ranks
// disagreeing) makes the group unhealthy for good: the call and every later
// one return UNAVAILABLE naming the rank. For spawned workers a monitor thread
// notices a dead child at once and cancels the calls in flight.
//
// Thread-compatible like WorkerGroup (one caller at a time), except Healthy()
// and worker_pids(), which any thread may call.
class GrpcWorkerGroup final : public WorkerGroup {
 public:
  // See ConnectWorkers / LaunchLocalWorkers in worker_group.h.
  static absl::StatusOr<std::unique_ptr<GrpcWorkerGroup>> Connect(
      const std::vector<std::string>& addresses, absl::Duration connect_timeout,
      const GrpcWorkerGroupOptions& options = {});
  static absl::StatusOr<std::unique_ptr<GrpcWorkerGroup>> Launch(
      const std::string& worker_binary, int world_size, absl::Duration start_timeout,
      const GrpcWorkerGroupOptions& options = {});

  GrpcWorkerGroup(const GrpcWorkerGroup&) = delete;
  GrpcWorkerGroup& operator=(const GrpcWorkerGroup&) = delete;
  // Calls Shutdown.
  ~GrpcWorkerGroup() override;

  // Sends each rank `request` with its own rank and world_size filled in.
  absl::StatusOr<pagoda::worker::v1::LoadModelResponse> LoadModel(
      const pagoda::worker::v1::LoadModelRequest& request) override;
  absl::Status InitCache(const pagoda::worker::v1::InitCacheRequest& request) override;
  absl::StatusOr<pagoda::worker::v1::StepResult> ExecuteStep(
      const pagoda::worker::v1::StepPlan& plan) override;
  bool Healthy() const override { return healthy_.load(); }
  int world_size() const override { return static_cast<int>(ranks_.size()); }
  // Idempotent. Afterwards every call returns UNAVAILABLE.
  void Shutdown() override;

  // Process ids of spawned workers in rank order (empty for Connect).
  std::vector<pid_t> worker_pids() const;

 private:
  struct Rank {
    std::string address;
    std::unique_ptr<pagoda::worker::v1::Worker::Stub> stub;
    std::unique_ptr<WorkerProcess> process;  // Null for connected workers.
  };

  explicit GrpcWorkerGroup(const GrpcWorkerGroupOptions& options);
  // Opens a channel to `address` for rank ranks_.size() and waits until
  // `deadline` for it to connect.
  absl::Status AddRank(const std::string& address, std::unique_ptr<WorkerProcess> process,
                       absl::Time deadline);

  // Sends requests[r] to rank r, all ranks at once, through `method`: a
  // callable (Stub::async_interface*, ClientContext*, const Request*,
  // Response*, std::function<void(grpc::Status)>) that starts the async call.
  // Fills one response per rank; returns the group's verdict (see above).
  template <typename Request, typename Response, typename AsyncMethod>
  absl::Status CallAllRanks(const char* name, AsyncMethod method,
                            const std::vector<const Request*>& requests, absl::Duration timeout,
                            std::vector<Response>& responses);

  // Marks the group unhealthy for `reason` (first reason wins) and cancels
  // every call in flight.
  void Fail(const std::string& reason);
  absl::Status UnavailableError();

  const GrpcWorkerGroupOptions options_;
  // Set once a factory finished: only a complete group asks its workers to
  // exit (a failed Connect must not stop workers it merely reached).
  bool complete_ = false;
  std::atomic<bool> healthy_{true};

  absl::Mutex mutex_;
  std::string failure_ ABSL_GUARDED_BY(mutex_);
  bool shutting_down_ ABSL_GUARDED_BY(mutex_) = false;
  absl::flat_hash_set<grpc::ClientContext*> in_flight_ ABSL_GUARDED_BY(mutex_);

  // Last member: destroyed first, so monitor threads (which call Fail) are
  // joined while the rest is still alive.
  std::vector<Rank> ranks_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_WORKERS_GRPC_WORKER_GROUP_H_
