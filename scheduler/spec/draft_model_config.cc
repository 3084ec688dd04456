#include "scheduler/spec/draft_model_config.h"

#include "absl/strings/str_cat.h"

namespace pagoda::scheduler {

absl::Status CheckDraftModelPlacement(const SpeculativeConfig& config, const std::string& device,
                                      int tensor_parallel_size) {
  if (device != "cpu") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--speculative-config: a draft model runs on --device cpu only so far, got --device ",
        device));
  }
  const int draft_size = DraftTensorParallelSize(config, tensor_parallel_size);
  if (draft_size != 1 && config.method != SpeculativeMethod::kDraftModel) {
    return absl::InvalidArgumentError(
        absl::StrCat("--speculative-config: an EAGLE head runs at draft_tensor_parallel_size 1 "
                     "only so far, got ",
                     draft_size, " (set \"draft_tensor_parallel_size\": 1)"));
  }
  return absl::OkStatus();
}

}  // namespace pagoda::scheduler
