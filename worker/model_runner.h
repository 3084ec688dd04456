#ifndef PAGODA_WORKER_MODEL_RUNNER_H_
#define PAGODA_WORKER_MODEL_RUNNER_H_

// ModelRunner: everything a worker does with bytes (load a model shard, size
// and own the KV cache, execute step plans), one per device kind.

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "pagoda/worker/v1/worker.pb.h"
#include "worker/lora/lora_adapter_loader.h"

namespace pagoda::worker {

// Waits for the token masks that follow a plan (SequenceStep.
// token_mask_follows): called by the step, after its forward pass, on every
// rank; returns the StepMasks that arrived. INVALID_ARGUMENT refuses the
// step (what came cannot be its masks); any other error (deadline,
// cancellation, a closed channel) is a fault. Null when no masks can
// follow: a plan that promises some is then refused.
using StepMaskWait = std::function<absl::StatusOr<pagoda::worker::v1::StepMasks>()>;

// Everything a worker does with bytes: load a model shard, size and own the
// KV cache, execute step plans. Knows nothing of gRPC: the worker service wraps
// it, and tests drive it directly. Not thread-safe: one caller at a time (the
// worker service serialises steps).
class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  // Loads weights and reports how many KV blocks fit: on CPU
  // kv_cache_memory_bytes / bytes_per_block.
  virtual absl::StatusOr<pagoda::worker::v1::LoadModelResponse> LoadModel(
      const pagoda::worker::v1::LoadModelRequest& request) = 0;

  // REQUIRES: LoadModel succeeded. Allocates num_gpu_blocks KV blocks (and
  // num_cpu_blocks of swap space).
  virtual absl::Status InitCache(const pagoda::worker::v1::InitCacheRequest& request) = 0;

  // REQUIRES: InitCache succeeded. Runs block moves, then one forward pass over
  // every sequence of the plan (any mix of prefill and decode, any lengths),
  // writing new K/V into the slots given by the block tables and reading
  // context K/V only through them, then samples one token for each sequence
  // with do_sample. INVALID_ARGUMENT for a malformed plan (block id out of
  // range, table too short for the positions, token id outside the vocabulary).
  // Anything that fails after validation is a fault (worker/step_execution.h):
  // INTERNAL for a backend's error, UNAVAILABLE, DEADLINE_EXCEEDED or ABORTED
  // for a failed tensor-parallel collective; every later step may fail too,
  // so the group must be loaded again.
  // `wait_for_masks` brings the masks the plan promised, after the forward
  // pass (StepMaskWait); masks that do not match the plan refuse the step
  // with INVALID_ARGUMENT (ApplyStepMasks) after the forward pass ran: the
  // cache then holds this step's writes, which only its own sequences read.
  virtual absl::StatusOr<pagoda::worker::v1::StepResult> ExecuteStep(
      const pagoda::worker::v1::StepPlan& plan, const StepMaskWait& wait_for_masks) = 0;
  // A plan with every mask inside it.
  absl::StatusOr<pagoda::worker::v1::StepResult> ExecuteStep(
      const pagoda::worker::v1::StepPlan& plan) {
    return ExecuteStep(plan, nullptr);
  }

  // Makes a collective in progress (and every later one) fail promptly, so a
  // step waiting on a peer that will never answer returns instead of holding
  // the worker until the collective timeout. Thread-safe: may be called from
  // any thread, during any other call, any number of times.
  virtual void Abort() {}

  // LoRA: what loads adapters into the loaded model's slots, beside the
  // steps (the worker service calls it without holding the step's lock);
  // null before LoadModel or when it asked for no slots (max_loras 0).
  virtual std::shared_ptr<LoraAdapterLoader> lora_loader() { return nullptr; }
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_MODEL_RUNNER_H_
