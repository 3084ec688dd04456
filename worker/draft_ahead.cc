// DraftModel's proposals for the next step (worker/draft_model.h,
// SequenceStep.num_next_draft_proposals): for a row whose drafts the server
// must see before it verifies them (a constrained row, whose masks follow
// each draft), the draft model or EAGLE head proposes after the step, from
// the tokens the step accepted, and the answer carries the proposals. Each
// proposing row runs as a one-row plan of its next step (the step's last
// token at its position, room for the drafts), so the passes are Propose's.
// docs/speculative-decoding.md.

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/draft_model.h"
#include "worker/last_sampled_tokens.h"
#include "worker/step_execution.h"

namespace pagoda::worker {

using v1::SequenceStep;
using v1::StepPlan;

namespace {

// What one proposing row's step gave it: the drafts accepted and the token
// after them.
struct AheadInput {
  int row = 0;  // Its index in the verified plan.
  int accepted = 0;
  int32_t last_token = 0;
};

// Only what the draft's draw reads (DraftBatchBuilder): no penalties,
// edits, masks or logprobs, which it ignores.
v1::SamplingOptions DrawOptions(const v1::SamplingOptions& sampling) {
  v1::SamplingOptions draw;
  draw.set_temperature(sampling.temperature());
  draw.set_top_k(sampling.top_k());
  draw.set_top_p(sampling.top_p());
  draw.set_seed(sampling.seed());
  draw.set_min_p(sampling.min_p());
  return draw;
}

// The next step of each row of `inputs` as the server will plan it: the
// last token at the position after the accepted drafts, with room for
// num_next_draft_proposals - 1 drafts (the passes feed all but the last
// proposal), its draws at the next output indices.
StepPlan AheadPlan(const StepPlan& verify, const std::vector<AheadInput>& inputs) {
  StepPlan ahead;
  ahead.set_step_id(verify.step_id());
  for (const AheadInput& input : inputs) {
    const SequenceStep& step = verify.sequences(input.row);
    SequenceStep* next = ahead.add_sequences();
    next->set_seq_id(step.seq_id());
    next->add_token_ids(input.last_token);
    next->set_start_position(step.start_position() + step.token_ids_size() + input.accepted);
    *next->mutable_block_table() = step.block_table();
    next->set_do_sample(true);
    *next->mutable_sampling() = DrawOptions(step.sampling());
    next->set_sample_index(step.sample_index() + input.accepted + 1);
    next->mutable_draft_token_ids()->Resize(step.num_next_draft_proposals() - 1, 0);
  }
  return ahead;
}

// The rows of `plan` that ask for next-step proposals, with (on rank 0)
// what `result` says their step gave them.
std::vector<AheadInput> AheadInputs(const StepPlan& plan, const v1::StepResult* result) {
  std::vector<AheadInput> inputs;
  int sampled = 0;  // result's tokens: one per row that samples, in order.
  for (int r = 0; r < plan.sequences_size(); ++r) {
    const SequenceStep& step = plan.sequences(r);
    if (!step.do_sample()) continue;
    const v1::SampledToken* token =
        result != nullptr && sampled < result->tokens_size() ? &result->tokens(sampled) : nullptr;
    ++sampled;
    if (step.num_next_draft_proposals() == 0) continue;
    AheadInput input{.row = r};
    if (token != nullptr) {
      input.accepted = token->accepted_draft_ids_size();
      input.last_token = token->token_id();
    }
    inputs.push_back(input);
  }
  return inputs;
}

}  // namespace

bool HasNextDraftProposals(const StepPlan& plan) {
  return std::any_of(plan.sequences().begin(), plan.sequences().end(),
                     [](const SequenceStep& step) { return step.num_next_draft_proposals() > 0; });
}

absl::Status CheckAheadRoom(const StepPlan& plan, const BatchLimits& limits) {
  std::vector<AheadInput> inputs;
  for (int r = 0; r < plan.sequences_size(); ++r) {
    const SequenceStep& step = plan.sequences(r);
    if (step.num_next_draft_proposals() <= 0) continue;
    // The furthest the proposals reach: every draft accepted (this step's
    // proposals count as drafts too).
    const int drafts = step.draft_token_ids_size() + step.num_draft_proposals();
    inputs.push_back(AheadInput{.row = r, .accepted = drafts, .last_token = 0});
  }
  if (inputs.empty()) return absl::OkStatus();
  BatchLimits room = limits;
  room.last_sampled = nullptr;
  absl::Status fits = FlattenStepPlan(AheadPlan(plan, inputs), room).status();
  if (fits.ok()) return fits;
  return absl::InvalidArgumentError(
      absl::StrCat("num_next_draft_proposals do not fit: ", fits.message()));
}

absl::Status DraftModel::ProposeAhead(const StepPlan& verify, v1::StepResult* result) {
  const bool answers = group_->rank() == 0;
  std::vector<AheadInput> inputs = AheadInputs(verify, answers ? result : nullptr);
  if (inputs.empty()) return absl::OkStatus();
  if (sharded()) {
    std::vector<int32_t> values;
    for (const AheadInput& input : inputs) {
      values.push_back(input.accepted);
      values.push_back(input.last_token);
    }
    if (absl::Status shared = ShareAheadInputs(&values); !shared.ok()) return shared;
    for (size_t i = 0; i < inputs.size(); ++i) {
      inputs[i].accepted = values[2 * i];
      inputs[i].last_token = values[2 * i + 1];
    }
  }
  const StepPlan ahead = AheadPlan(verify, inputs);
  // CheckAheadRoom held for the most drafts accepted, so for any fewer.
  absl::StatusOr<FlatBatch> batch = FlattenStepPlan(ahead, limits_);
  if (!batch.ok()) return batch.status();
  std::vector<int> asked;
  for (const AheadInput& input : inputs) {
    asked.push_back(verify.sequences(input.row).num_next_draft_proposals());
  }
  absl::StatusOr<Drafts> drafts =
      is_eagle() ? RunEaglePasses(ahead, *batch, asked) : RunPasses(*batch, asked, true);
  if (!drafts.ok()) return drafts.status();
  if (!answers) return absl::OkStatus();
  for (size_t i = 0, t = 0; i < inputs.size(); ++i) {
    const int64_t seq_id = verify.sequences(inputs[i].row).seq_id();
    while (t < static_cast<size_t>(result->tokens_size()) && result->tokens(t).seq_id() != seq_id) {
      ++t;
    }
    if (t == static_cast<size_t>(result->tokens_size())) break;
    result->mutable_tokens(t)->mutable_next_draft_ids()->Add((*drafts)[i].begin(),
                                                             (*drafts)[i].end());
  }
  return absl::OkStatus();
}

absl::Status DraftModel::ShareAheadInputs(std::vector<int32_t>* accepted_and_last) {
  // Only rank 0 sampled: one all-reduce gives the others its values (both
  // below 2^24, exact in its f32).
  if (group_->rank() != 0) std::fill(accepted_and_last->begin(), accepted_and_last->end(), 0);
  std::vector<int32_t> indices(accepted_and_last->size());
  for (size_t i = 0; i < indices.size(); ++i) indices[i] = static_cast<int32_t>(i);
  return ShareLastSampledTokens(indices, group_, backend_, &share_staging_, accepted_and_last);
}

}  // namespace pagoda::worker
