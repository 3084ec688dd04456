#ifndef PAGODA_WORKER_WORKER_SERVICE_H_
#define PAGODA_WORKER_WORKER_SERVICE_H_

// WorkerService: the pagoda.worker.v1.Worker gRPC service: the secret and
// ownership checks, model loading, cache init and step execution.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "pagoda/worker/v1/worker.grpc.pb.h"
#include "wire/limits.h"
#include "worker/block_table_cache.h"
#include "worker/model_runner.h"
#include "worker/step_cancellation.h"
#include "worker/step_idle_histogram.h"
#include "worker/step_mask_mailbox.h"
#include "worker/worker_ownership.h"

namespace pagoda::worker {

// Converts an absl::Status to the grpc::Status with the same canonical code
// and message (the two code spaces are the same numbers by design).
grpc::Status ToGrpcStatus(const absl::Status& status);

// Makes the ModelRunner for a device name from LoadModelRequest.device ("cpu",
// "cuda"; empty means "cpu"). Returns INVALID_ARGUMENT for a device this build
// cannot serve.
using ModelRunnerFactory =
    std::function<absl::StatusOr<std::unique_ptr<ModelRunner>>(const std::string& device)>;

// The gRPC face of one worker rank: pagoda.worker.v1.Worker over a ModelRunner.
//
// Every LoadModel makes a fresh runner (dropping the old one and its cache), so
// a server can re-initialise a worker. InitCache and ExecuteStep before a
// successful LoadModel return FAILED_PRECONDITION. Shutdown replies, then calls
// `on_shutdown` so the owner can stop the server once the reply is sent.
//
// Faults: a step that fails after its plan was validated (a device or
// backend error, a collective that failed; see worker/step_execution.h)
// comes back as INTERNAL, UNAVAILABLE, ABORTED...; a device fault (INTERNAL)
// marks this worker unhealthy: every later InitCache and ExecuteStep is refused UNAVAILABLE,
// naming the first fault, until a LoadModel replaces the runner (the server
// restarts the group, then replays LoadModel). A refused plan
// (INVALID_ARGUMENT) changes nothing and leaves the worker healthy.
//
// Authentication: every call must carry `secret` in the metadata entry
// kWorkerSecretMetadataKey (common/worker_secret.h); any other call gets
// UNAUTHENTICATED before it touches the runner, so it changes nothing.
// Ownership: every call also carries its server's owner id
// (wire/worker_owner.h); the first LoadModel binds the worker to it, and
// another server's calls get FAILED_PRECONDITION and change nothing.
//
// Thread-safe: gRPC calls the handlers from many threads; they are serialised
// on one mutex, so at most one runner call is in progress at a time.
class WorkerService final : public pagoda::worker::v1::Worker::Service {
 public:
  // `on_shutdown` is called from a handler thread, at most once per Shutdown
  // RPC; it must not block on the server (it should only signal).
  // `secret` must be non-empty.
  // `owner_timeout`: how long the owning server may stay silent before
  // another may take this worker over (worker/worker_ownership.h).
  // `max_receive_message_bytes`: the gRPC receive limit this worker serves
  // with, reported in every LoadModelResponse.
  WorkerService(int rank, std::string secret, ModelRunnerFactory runner_factory,
                std::function<void()> on_shutdown,
                absl::Duration owner_timeout = absl::Seconds(30),
                int max_receive_message_bytes = wire::kMaxWorkerMessageBytes);

  WorkerService(const WorkerService&) = delete;
  WorkerService& operator=(const WorkerService&) = delete;

  grpc::Status LoadModel(grpc::ServerContext* context,
                         const pagoda::worker::v1::LoadModelRequest* request,
                         pagoda::worker::v1::LoadModelResponse* response) override;
  grpc::Status InitCache(grpc::ServerContext* context,
                         const pagoda::worker::v1::InitCacheRequest* request,
                         pagoda::worker::v1::InitCacheResponse* response) override;
  grpc::Status ExecuteStep(grpc::ServerContext* context, const pagoda::worker::v1::StepPlan* plan,
                           pagoda::worker::v1::StepResult* result) override;
  // Hands the masks to the step waiting for them (StepMaskMailbox), without
  // waiting for the step's lock: that step holds it.
  grpc::Status SendStepMasks(grpc::ServerContext* context,
                             const pagoda::worker::v1::StepMasks* masks,
                             pagoda::worker::v1::StepMasksResponse* response) override;
  grpc::Status Shutdown(grpc::ServerContext* context,
                        const pagoda::worker::v1::ShutdownRequest* request,
                        pagoda::worker::v1::ShutdownResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context,
                         const pagoda::worker::v1::HeartbeatRequest* request,
                         pagoda::worker::v1::HeartbeatResponse* response) override;
  // LoRA: the read, slicing and copy run outside the step's lock, so a
  // load never stalls the steps (docs/lora.md).
  grpc::Status LoadLoraAdapter(grpc::ServerContext* context,
                               const pagoda::worker::v1::LoadLoraAdapterRequest* request,
                               pagoda::worker::v1::LoadLoraAdapterResponse* response) override;
  grpc::Status UnloadLoraAdapter(grpc::ServerContext* context,
                                 const pagoda::worker::v1::UnloadLoraAdapterRequest* request,
                                 pagoda::worker::v1::UnloadLoraAdapterResponse* response) override;

  // ExecuteStep for the step channel of a spawned worker
  // (worker/step_channel_server.h): the same checks and runner call without
  // gRPC. The channel is a socket only the spawning server holds, so it is
  // the credential. Nothing cancels its collectives: a group that failed is
  // restarted whole, and stopping aborts them (AbortCollectives).
  // `wait_for_masks` reads the masks that follow the plan on that channel.
  // `plan`'s row deltas (block tables, unchanged sampling options) are
  // resolved in place (BlockTableCache).
  absl::StatusOr<pagoda::worker::v1::StepResult> ExecuteLocalStep(
      pagoda::worker::v1::StepPlan* plan, const StepMaskWait& wait_for_masks);

  // Makes a step stuck in a tensor-parallel collective fail promptly (and
  // every later one), e.g. when the worker is stopping and its peers may be
  // gone. Thread-safe; does not wait for the call in progress.
  void AbortCollectives();

  // Whether `presented` (nullopt: the call carried none) is the server's
  // secret. A refusal is counted (refused_calls) and logged at most once a
  // second, naming `peer`. Thread-safe: the handlers call it, and so does
  // SecretAuthProcessor before a call's message is read.
  bool HasSecret(std::optional<absl::string_view> presented, absl::string_view peer) const;

  // Calls refused for a missing or wrong secret since start. They are logged
  // at most once a second, with this count.
  int64_t refused_calls() const { return refused_calls_.load(); }
  // The gaps between this worker's steps, whichever runner ran them
  // (pagoda_worker_idle_between_steps_seconds). Thread-safe.
  StepIdleHistogram::Snapshot idle_between_steps() const { return idle_between_steps_.Read(); }

  // The message of every refusal (UNAUTHENTICATED).
  static constexpr char kRefusalMessage[] = "this worker serves only the server that launched it";

  // OK while healthy; else the fault that made this worker unhealthy.
  absl::Status fault() const;

 private:
  // UNAVAILABLE naming fault_ once a step failed with a fault, else OK.
  absl::Status CheckHealthy() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // OK if `context` carries the secret, else UNAUTHENTICATED.
  grpc::Status Authenticate(const grpc::ServerContext& context) const;
  // Authenticate, then the owner check (Claim for LoadModel, else Check):
  // FAILED_PRECONDITION for another server's call.
  grpc::Status Admit(const grpc::ServerContext& context, bool claim);
  void SetAbortable(ModelRunner* runner) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The loaded runner's LoRA loader, which LoRA calls use without mutex_
  // (held by a running step, which may be waiting for its masks):
  // FAILED_PRECONDITION before LoadModel or when the model has no slots.
  absl::StatusOr<std::shared_ptr<LoraAdapterLoader>> LoraLoader() ABSL_LOCKS_EXCLUDED(mutex_);
  // Publishes `runner`'s loader (null: none) for LoraLoader.
  void SetLoraLoader(ModelRunner* runner) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The runner's step with the result's timing filled in; the caller holds
  // mutex_ and has checked that a cache is ready. `plan` has no block-table
  // deltas left (ResolveBlockTables ran) and its tables are pending in
  // block_tables_, committed if the step succeeds and cleared if not.
  absl::StatusOr<pagoda::worker::v1::StepResult> RunStep(const pagoda::worker::v1::StepPlan& plan,
                                                         const StepMaskWait& wait_for_masks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Resolves `plan`'s deltas in place, or records its whole tables;
  // a refusal clears block_tables_.
  absl::Status ResolveBlockTables(pagoda::worker::v1::StepPlan* plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const int rank_;
  const std::string secret_;
  const ModelRunnerFactory runner_factory_;
  const std::function<void()> on_shutdown_;
  const int max_receive_message_bytes_;

  WorkerOwnership ownership_;
  // Where SendStepMasks meets the gRPC step waiting for its masks.
  StepMaskMailbox masks_;
  mutable std::atomic<int64_t> refused_calls_{0};
  StepIdleHistogram idle_between_steps_;
  mutable std::atomic<int64_t> last_refusal_log_ns_{0};

  mutable absl::Mutex mutex_;
  // Null until a LoadModel succeeds.
  std::unique_ptr<ModelRunner> runner_ ABSL_GUARDED_BY(mutex_);
  bool cache_ready_ ABSL_GUARDED_BY(mutex_) = false;
  // The whole block tables of the last completed step, which plans'
  // deltas extend; reset by LoadModel and InitCache.
  BlockTableCache block_tables_ ABSL_GUARDED_BY(mutex_);
  // The first fault of the current runner (OK while healthy).
  absl::Status fault_ ABSL_GUARDED_BY(mutex_);
  // runner_ for AbortCollectives, which must not wait for mutex_ (held by a
  // stuck step). Changed only while both mutexes are held.
  absl::Mutex abort_mutex_ ABSL_ACQUIRED_AFTER(mutex_);
  ModelRunner* abortable_runner_ ABSL_GUARDED_BY(abort_mutex_) = nullptr;
  // runner_'s LoRA loader, likewise outside mutex_: a load runs beside the
  // steps. Changed only while both mutexes are held.
  absl::Mutex lora_mutex_ ABSL_ACQUIRED_AFTER(mutex_);
  bool model_loaded_ ABSL_GUARDED_BY(lora_mutex_) = false;
  std::shared_ptr<LoraAdapterLoader> lora_loader_ ABSL_GUARDED_BY(lora_mutex_);
  // A step the server cancelled (it gave up on the group) aborts its
  // collectives rather than wait on peers that may never answer.
  StepCancellationWatcher cancellation_;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_WORKER_SERVICE_H_
