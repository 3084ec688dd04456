#ifndef PAGODA_WORKER_MODEL_RUNNER_H_
#define PAGODA_WORKER_MODEL_RUNNER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "pagoda/worker/v1/worker.pb.h"

namespace pagoda::worker {

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
  virtual absl::StatusOr<pagoda::worker::v1::StepResult> ExecuteStep(
      const pagoda::worker::v1::StepPlan& plan) = 0;

  // Makes a collective in progress (and every later one) fail promptly, so a
  // step waiting on a peer that will never answer returns instead of holding
  // the worker until the collective timeout. Thread-safe: may be called from
  // any thread, during any other call, any number of times.
  virtual void Abort() {}
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_MODEL_RUNNER_H_
