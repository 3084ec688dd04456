#ifndef PAGODA_SCHEDULER_WORKERS_WORKER_GROUP_H_
#define PAGODA_SCHEDULER_WORKERS_WORKER_GROUP_H_

// WorkerGroup: the interface between the engine and the workers that execute
// its steps (load, cache init, execute, recover, shut down).

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pagoda/worker/v1/worker.pb.h"

namespace pagoda::scheduler {

// Computes the token masks a step plan promised (SequenceStep.
// token_mask_follows). ExecuteStep calls it once, on its own thread, after
// the plan went out, so that it runs while the workers run the forward
// pass; the masks then follow the plan to every rank.
using StepMaskSource = std::function<pagoda::worker::v1::StepMasks()>;

// Whether `plan` promises token masks (then ExecuteStep needs a source).
// Inline: the engine and its test fakes use it without the gRPC group.
inline bool PromisesTokenMasks(const pagoda::worker::v1::StepPlan& plan) {
  for (const pagoda::worker::v1::SequenceStep& step : plan.sequences()) {
    if (step.token_mask_follows()) return true;
  }
  return false;
}

// All the workers (tensor-parallel ranks) the engine drives as one. Every call
// sends the same message to every rank and waits for all of them. Any rank
// failing (process died, RPC error, deadline) makes the call return
// UNAVAILABLE naming the rank, and the group is unhealthy from then on. The
// exception: when every rank rejects the request with the same request-level
// code (INVALID_ARGUMENT for a malformed plan, NOT_FOUND for a missing model,
// FAILED_PRECONDITION, ...), that status is returned and the group stays
// healthy, since no worker changed state.
// Thread-compatible: the engine thread makes the calls; Healthy() may be read
// from any thread.
class WorkerGroup {
 public:
  virtual ~WorkerGroup() = default;

  // Returns rank 0's response with num_gpu_blocks = the minimum over ranks.
  virtual absl::StatusOr<pagoda::worker::v1::LoadModelResponse> LoadModel(
      const pagoda::worker::v1::LoadModelRequest& request) = 0;
  virtual absl::Status InitCache(const pagoda::worker::v1::InitCacheRequest& request) = 0;
  // Returns rank 0's result (the only one with sampled tokens). When the
  // plan promises token masks, sends it, calls `masks` (unless the group
  // failed first) and sends what it returns; a plan that promises masks
  // without a source is refused (INVALID_ARGUMENT), and so are masks that
  // do not fit the plan (by the workers, after the forward pass).
  virtual absl::StatusOr<pagoda::worker::v1::StepResult> ExecuteStep(
      const pagoda::worker::v1::StepPlan& plan, const StepMaskSource& masks) = 0;
  // A plan that promises no masks.
  absl::StatusOr<pagoda::worker::v1::StepResult> ExecuteStep(
      const pagoda::worker::v1::StepPlan& plan) {
    return ExecuteStep(plan, nullptr);
  }
  // Pipelined steps, for overlapped scheduling (AsyncStepQueue): SendStep
  // sends a plan (and its masks) as ExecuteStep does but returns once they
  // went out; ReceiveStep returns the answer of the oldest step sent and not
  // yet received. So step N + 1 can travel while step N still runs, and the
  // worker reads it the moment it answers N. Only a group whose steps travel
  // one ordered channel offers them (SupportsPipelinedSteps); a caller uses
  // either these or ExecuteStep, and one thread may send while another
  // receives. A step whose SendStep failed has no answer to receive.
  virtual bool SupportsPipelinedSteps() const { return false; }
  virtual absl::Status SendStep(const pagoda::worker::v1::StepPlan& /*plan*/,
                                const StepMaskSource& /*masks*/) {
    return absl::UnimplementedError("this worker group does not pipeline steps");
  }
  virtual absl::StatusOr<pagoda::worker::v1::StepResult> ReceiveStep() {
    return absl::UnimplementedError("this worker group does not pipeline steps");
  }
  // LoRA (docs/lora.md): loads an adapter directory into a slot on every
  // rank (each reads its own slice), or empties a slot. Unlike the calls
  // above, these may run on another thread while the engine thread runs a
  // step (not during LoadModel, Recover or Shutdown): the workers load
  // beside their steps. A step may name the slot once this returned OK.
  // Recover does not replay them: the restarted workers' slots are empty.
  // Returns rank 0's response. UNIMPLEMENTED for a group without LoRA.
  virtual absl::StatusOr<pagoda::worker::v1::LoadLoraAdapterResponse> LoadLoraAdapter(
      const pagoda::worker::v1::LoadLoraAdapterRequest& /*request*/) {
    return absl::UnimplementedError("this worker group serves no LoRA adapters");
  }
  virtual absl::Status UnloadLoraAdapter(
      const pagoda::worker::v1::UnloadLoraAdapterRequest& /*request*/) {
    return absl::UnimplementedError("this worker group serves no LoRA adapters");
  }
  virtual bool Healthy() const = 0;
  virtual int world_size() const = 0;
  // After a failure: brings the whole group back (every rank restarted or
  // reconnected together, the last LoadModel and InitCache replayed), so the
  // caller can resume its requests by recomputation (the new workers' KV
  // caches are empty). OK once Healthy() again; UNAVAILABLE, with the reason,
  // when the group cannot come back (or this kind of group cannot recover),
  // which is final. Called by the engine thread only.
  virtual absl::Status Recover() {
    return absl::UnavailableError("this worker group cannot be restarted");
  }
  // Asks every worker to exit and, for spawned workers, reaps them.
  virtual void Shutdown() = 0;
};

// Connects to already-running workers ("host:port", one per rank, rank order)
// that were started with `secret` (every call carries it). Fails with
// UNAVAILABLE if one cannot be reached within `connect_timeout`.
absl::StatusOr<std::unique_ptr<WorkerGroup>> ConnectWorkers(
    const std::vector<std::string>& addresses, const std::string& secret,
    absl::Duration connect_timeout);

// Local mode: spawns `world_size` pagoda-worker processes from `worker_binary`,
// each on a Unix socket in its own private directory with its own secret (see
// WorkerProcess), and connects to them. The workers die with
// the server (they are killed on Shutdown and exit if the server dies).
absl::StatusOr<std::unique_ptr<WorkerGroup>> LaunchLocalWorkers(const std::string& worker_binary,
                                                                int world_size,
                                                                absl::Duration start_timeout);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_WORKERS_WORKER_GROUP_H_
