#include "worker/last_sampled_tokens.h"

#include <algorithm>
#include <vector>

namespace pagoda::worker {

void LastSampledTokens::Record(const v1::StepPlan& plan, const v1::StepResult* result) {
  tokens_.clear();
  step_id_ = plan.step_id();
  for (const v1::SequenceStep& step : plan.sequences()) {
    if (step.do_sample() && step.draft_token_ids().empty()) {
      tokens_[step.seq_id()] = kUnknownToken;
    }
  }
  if (result == nullptr) return;
  for (const v1::SampledToken& token : result->tokens()) {
    auto it = tokens_.find(token.seq_id());
    if (it != tokens_.end()) it->second = token.token_id();
  }
}

std::optional<int32_t> LastSampledTokens::Find(int64_t seq_id) const {
  auto it = tokens_.find(seq_id);
  if (it == tokens_.end()) return std::nullopt;
  return it->second;
}

absl::Status ShareLastSampledTokens(const std::vector<int32_t>& rows, Communicator* communicator,
                                    Backend* backend, std::unique_ptr<Buffer>* staging,
                                    std::vector<int32_t>* input_ids) {
  if (rows.empty() || communicator->world_size() == 1) return absl::OkStatus();
  if (*staging == nullptr || (*staging)->size() < rows.size()) {
    *staging = backend->Allocate(DType::kF32, std::max<size_t>(rows.size(), 64));
  }
  std::vector<float> tokens(rows.size(), 0.0f);
  if (communicator->rank() == 0) {
    for (size_t i = 0; i < rows.size(); ++i) tokens[i] = static_cast<float>((*input_ids)[rows[i]]);
  }
  const size_t bytes = rows.size() * sizeof(float);
  backend->UploadBytes(tokens.data(), (*staging)->raw(), bytes);
  absl::Status status = communicator->AllReduceSum((*staging)->raw(), rows.size(), DType::kF32);
  if (!status.ok()) return status;
  backend->DownloadBytes((*staging)->raw(), tokens.data(), bytes);
  for (size_t i = 0; i < rows.size(); ++i) {
    (*input_ids)[rows[i]] = static_cast<int32_t>(tokens[i]);
  }
  return absl::OkStatus();
}

}  // namespace pagoda::worker
