#ifndef PAGODA_TESTS_FAKES_RESTARTABLE_WORKER_GROUP_H_
#define PAGODA_TESTS_FAKES_RESTARTABLE_WORKER_GROUP_H_

#include <atomic>
#include <memory>
#include <optional>

#include "tests/fakes/in_process_worker_group.h"

namespace pagoda::scheduler {

// One in-process CPU rank that can die and be brought back with an empty
// cache (Recover loads the model and initialises the cache again in a new
// runner: nothing of the old one survives), for engine recovery tests.
// Crash() and CrashBeforeStep() may be called from any thread; the rest
// from the engine's, as every WorkerGroup.
class RestartableWorkerGroup : public WorkerGroup {
 public:
  RestartableWorkerGroup();

  absl::StatusOr<pagoda::worker::v1::LoadModelResponse> LoadModel(
      const pagoda::worker::v1::LoadModelRequest& request) override;
  absl::Status InitCache(const pagoda::worker::v1::InitCacheRequest& request) override;
  // UNAVAILABLE while crashed; otherwise the runner's answer.
  absl::StatusOr<pagoda::worker::v1::StepResult> ExecuteStep(
      const pagoda::worker::v1::StepPlan& plan, const StepMaskSource& masks) override;
  using WorkerGroup::ExecuteStep;
  bool Healthy() const override { return !crashed_.load(); }
  int world_size() const override { return 1; }
  void Shutdown() override { inner_->Shutdown(); }
  // A fresh runner with the last LoadModel and InitCache requests, unless
  // set_can_recover(false).
  absl::Status Recover() override;

  // Dies now.
  void Crash() { crashed_.store(true); }
  // Dies instead of running the `step`-th ExecuteStep call (counted from 1,
  // over every runner), once.
  void CrashBeforeStep(int step) { crash_step_.store(step); }
  // Dies in the `step`-th ExecuteStep call that promises token masks
  // (counted from 1), once: after its plan and forward pass, while its
  // sampler waits for the masks, which never reach it.
  void CrashBeforeMasks(int step) { crash_masks_step_.store(step); }
  void set_can_recover(bool can) { can_recover_.store(can); }
  int restarts() const { return restarts_.load(); }
  // Swap-out moves in the plans run so far: whether preemption swapped.
  int swap_out_moves() const { return swap_out_moves_.load(); }

 private:
  std::unique_ptr<InProcessWorkerGroup> inner_;
  std::optional<pagoda::worker::v1::LoadModelRequest> load_;
  std::optional<pagoda::worker::v1::InitCacheRequest> init_;
  std::atomic<bool> crashed_{false};
  // Set by the test while the engine thread steps or recovers (TSan).
  std::atomic<bool> can_recover_{true};
  std::atomic<int> crash_step_{0};
  std::atomic<int> crash_masks_step_{0};
  std::atomic<int> masked_steps_{0};
  std::atomic<int> steps_{0};
  std::atomic<int> restarts_{0};
  std::atomic<int> swap_out_moves_{0};
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_TESTS_FAKES_RESTARTABLE_WORKER_GROUP_H_
