#include "scheduler/spec/draft_model_config.h"

#include "absl/strings/str_cat.h"

namespace pagoda::scheduler {

absl::Status CheckDraftModelPlacement(const SpeculativeConfig& config, const std::string& device,
                                      int /*tensor_parallel_size*/) {
  if (device != "cpu") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--speculative-config: a draft model runs on --device cpu only so far, got --device ",
        device));
  }
  return absl::OkStatus();
}

}  // namespace pagoda::scheduler
