#include "scheduler/spec/draft_model_config.h"

#include "absl/strings/str_cat.h"

namespace pagoda::scheduler {

absl::Status CheckDraftModelPlacement(const std::string& device, int tensor_parallel_size) {
  if (device != "cpu") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--speculative-config: a draft model runs on --device cpu only so far, got --device ",
        device));
  }
  if (tensor_parallel_size != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--speculative-config: a draft model runs with --tensor-parallel-size 1 "
                     "only so far, got ",
                     tensor_parallel_size));
  }
  return absl::OkStatus();
}

}  // namespace pagoda::scheduler
