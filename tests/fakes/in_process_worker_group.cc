#include "tests/fakes/in_process_worker_group.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace pagoda::scheduler {
namespace {

absl::Status DeadWorker() { return absl::UnavailableError("rank 0: in-process worker is down"); }

}  // namespace

InProcessWorkerGroup::InProcessWorkerGroup(std::unique_ptr<pagoda::worker::ModelRunner> runner)
    : runner_(std::move(runner)) {}

absl::StatusOr<pagoda::worker::v1::LoadModelResponse> InProcessWorkerGroup::LoadModel(
    const pagoda::worker::v1::LoadModelRequest& request) {
  if (!Healthy() || runner_ == nullptr) return DeadWorker();
  return runner_->LoadModel(request);
}

absl::Status InProcessWorkerGroup::InitCache(const pagoda::worker::v1::InitCacheRequest& request) {
  if (!Healthy() || runner_ == nullptr) return DeadWorker();
  block_tables_.Reset(request.num_gpu_blocks());
  return runner_->InitCache(request);
}

absl::StatusOr<pagoda::worker::v1::StepResult> InProcessWorkerGroup::ExecuteStep(
    const pagoda::worker::v1::StepPlan& plan, const StepMaskSource& masks) {
  pagoda::worker::StepMaskWait wait;
  if (masks != nullptr) {
    wait = [&masks]() -> absl::StatusOr<pagoda::worker::v1::StepMasks> { return masks(); };
  }
  return ExecuteStepWithWait(plan, wait);
}

absl::StatusOr<pagoda::worker::v1::StepResult> InProcessWorkerGroup::ExecuteStepWithWait(
    const pagoda::worker::v1::StepPlan& plan, const pagoda::worker::StepMaskWait& wait_for_masks) {
  if (!Healthy() || runner_ == nullptr) return DeadWorker();
  pagoda::worker::v1::StepPlan resolved;
  const pagoda::worker::v1::StepPlan* run = &plan;
  if (pagoda::worker::HasRowDeltas(plan)) {
    resolved = plan;
    run = &resolved;
    if (absl::Status tables = block_tables_.Resolve(&resolved); !tables.ok()) {
      block_tables_.Clear();
      return tables;
    }
  } else {
    block_tables_.Record(plan);
  }
  absl::StatusOr<pagoda::worker::v1::StepResult> result =
      runner_->ExecuteStep(*run, wait_for_masks);
  if (result.ok()) {
    block_tables_.Commit();
  } else {
    block_tables_.Clear();
  }
  if (!result.ok() && !absl::IsInvalidArgument(result.status())) {
    healthy_.store(false);
    return absl::UnavailableError(absl::StrCat("rank 0: ", result.status().ToString()));
  }
  return result;
}

}  // namespace pagoda::scheduler
