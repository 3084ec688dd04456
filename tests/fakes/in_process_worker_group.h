#ifndef PAGODA_TESTS_SUPPORT_IN_PROCESS_WORKER_GROUP_H_
#define PAGODA_TESTS_SUPPORT_IN_PROCESS_WORKER_GROUP_H_

#include <atomic>
#include <memory>

#include "scheduler/workers/worker_group.h"
#include "worker/block_table_cache.h"
#include "worker/model_runner.h"

namespace pagoda::scheduler {

// A one-rank WorkerGroup that calls a ModelRunner in this process: no
// processes, no RPC. For engine tests and single-process tools.
// Thread-compatible like every WorkerGroup; Healthy() may be read anywhere.
class InProcessWorkerGroup : public WorkerGroup {
 public:
  explicit InProcessWorkerGroup(std::unique_ptr<pagoda::worker::ModelRunner> runner);

  absl::StatusOr<pagoda::worker::v1::LoadModelResponse> LoadModel(
      const pagoda::worker::v1::LoadModelRequest& request) override;
  absl::Status InitCache(const pagoda::worker::v1::InitCacheRequest& request) override;
  // INVALID_ARGUMENT (a malformed plan, the runner's state unchanged) comes
  // back as is; any other runner error marks the group unhealthy and comes
  // back as UNAVAILABLE, as a remote worker's failure would. The masks a
  // plan promises are computed when the runner's sampler waits for them
  // (after the forward pass, on this thread).
  absl::StatusOr<pagoda::worker::v1::StepResult> ExecuteStep(
      const pagoda::worker::v1::StepPlan& plan, const StepMaskSource& masks) override;
  using WorkerGroup::ExecuteStep;
  // The same with `wait_for_masks` as the runner's wait itself (tests that
  // stand for a worker whose masks come late, or never).
  absl::StatusOr<pagoda::worker::v1::StepResult> ExecuteStepWithWait(
      const pagoda::worker::v1::StepPlan& plan, const pagoda::worker::StepMaskWait& wait_for_masks);
  bool Healthy() const override { return healthy_.load(); }
  int world_size() const override { return 1; }
  void Shutdown() override { runner_.reset(); }

  // Makes every later call fail, as if the worker process had died.
  void SimulateCrash() { healthy_.store(false); }

 private:
  std::unique_ptr<pagoda::worker::ModelRunner> runner_;
  std::atomic<bool> healthy_{true};
  // The plans' block-table deltas, resolved as a worker's service does.
  pagoda::worker::BlockTableCache block_tables_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_TESTS_SUPPORT_IN_PROCESS_WORKER_GROUP_H_
