#include "tests/fakes/restartable_worker_group.h"

#include <utility>

#include "worker/cpu/cpu_model_runner.h"

namespace pagoda::scheduler {
namespace {

namespace wv1 = ::pagoda::worker::v1;

std::unique_ptr<InProcessWorkerGroup> FreshRunner() {
  return std::make_unique<InProcessWorkerGroup>(pagoda::worker::CreateCpuModelRunner());
}

}  // namespace

RestartableWorkerGroup::RestartableWorkerGroup() : inner_(FreshRunner()) {}

absl::StatusOr<wv1::LoadModelResponse> RestartableWorkerGroup::LoadModel(
    const wv1::LoadModelRequest& request) {
  load_ = request;
  return inner_->LoadModel(request);
}

absl::Status RestartableWorkerGroup::InitCache(const wv1::InitCacheRequest& request) {
  init_ = request;
  return inner_->InitCache(request);
}

absl::StatusOr<wv1::StepResult> RestartableWorkerGroup::ExecuteStep(const wv1::StepPlan& plan,
                                                                    const StepMaskSource& masks) {
  if (steps_.fetch_add(1) + 1 == crash_step_.load()) crashed_.store(true);
  if (crashed_.load()) return absl::UnavailableError("worker crashed");
  swap_out_moves_ += plan.swap_out_size();
  if (masks == nullptr || !PromisesTokenMasks(plan) ||
      masked_steps_.fetch_add(1) + 1 != crash_masks_step_.load()) {
    return inner_->ExecuteStep(plan, masks);
  }
  // Killed between the plan and its masks: the forward pass ran.
  absl::StatusOr<wv1::StepResult> result =
      inner_->ExecuteStepWithWait(plan, [this]() -> absl::StatusOr<wv1::StepMasks> {
        crashed_.store(true);
        return absl::UnavailableError("worker crashed before its token masks came");
      });
  return result.ok() ? absl::InternalError("a step without its masks succeeded") : result.status();
}

absl::Status RestartableWorkerGroup::Recover() {
  if (!can_recover_.load()) return absl::UnavailableError("the model is gone; giving up");
  inner_ = FreshRunner();  // A new process: nothing of the old cache survives.
  absl::StatusOr<wv1::LoadModelResponse> loaded = inner_->LoadModel(*load_);
  if (!loaded.ok()) return loaded.status();
  if (absl::Status init = inner_->InitCache(*init_); !init.ok()) return init;
  crashed_.store(false);
  ++restarts_;
  return absl::OkStatus();
}

}  // namespace pagoda::scheduler
