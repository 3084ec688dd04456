// DraftModel's passes for the eagle method (worker/draft_model.h): the
// EAGLE head's row at position p reads (token p + 1, feature p), where the
// feature is the target's final hidden state at p once the target verified
// p, and the head's own output at p - 1 while it drafts past the verified
// tokens (vLLM's EagleProposer). Its KV cache at p therefore needs the token
// after p, so the head lags the target by one token: each step first runs
// the rows the target verified in the sequence's last step, whose last
// token is this step's input. docs/speculative-decoding.md.

#include <algorithm>
#include <vector>

#include "worker/draft_batch_builder.h"
#include "worker/draft_model.h"

namespace pagoda::worker {

using v1::StepPlan;

absl::Status DraftModel::EagleForwardAndPick(const FlatBatch& batch,
                                             const std::vector<char>& features, bool from_target,
                                             std::vector<char>* head_hidden) {
  absl::StatusOr<ForwardOutput> output =
      model_->ForwardEagle(batch, cache_.get(), features.data(), from_target);
  if (!output.ok()) return output.status();
  const int rows = batch.num_logits_rows();
  if (rows > 0) {
    backend_->Sample(output->logits, output->sampling, &samples_);
    head_hidden->resize(static_cast<size_t>(rows) * model_->hidden_row_bytes());
    backend_->DownloadBytes(output->head_hidden, head_hidden->data(), head_hidden->size());
  }
  return backend_->status();
}

absl::StatusOr<DraftModel::Drafts> DraftModel::RunEaglePasses(const StepPlan& plan,
                                                              const FlatBatch& batch,
                                                              const std::vector<int>& asked) {
  const int num_seqs = batch.num_seqs();
  const int block_size = cache_->shape().block_size;
  const size_t row_bytes = model_->hidden_row_bytes();  // The head's output.
  Drafts drafts(num_seqs);
  if (batch.num_tokens() == 0) return drafts;
  // Pass 0: per sequence, the rows its last step verified, the last one
  // fed this step's input token; a proposing sequence's last row gives its
  // first draft. A sequence without kept rows (its first step, or its rows
  // forgotten) runs nothing, and proposes nothing.
  DraftBatchBuilder first_pass(batch);
  std::vector<char> features;
  std::vector<int> picking;  // Sequences with a logits row, in order.
  for (int s = 0; s < num_seqs; ++s) {
    const int first_row = batch.query_start[s];
    const EagleFeatureRows* kept =
        eagle_->Find(plan.sequences(s).seq_id(), batch.positions[first_row]);
    if (kept == nullptr) continue;
    std::vector<int32_t> tokens = kept->next_tokens;
    tokens.push_back(batch.input_ids[first_row]);
    first_pass.AddRows(s, kept->first_position, tokens, asked[s] > 0, block_size);
    features.insert(features.end(), kept->hidden.begin(), kept->hidden.end());
    if (asked[s] > 0) picking.push_back(s);
  }
  FlatBatch pass = first_pass.Take();
  std::vector<char> head_hidden;
  for (int j = 0; pass.num_tokens() > 0; ++j) {
    if (absl::Status status = EagleForwardAndPick(pass, features, j == 0, &head_hidden);
        !status.ok()) {
      return status;
    }
    // Pass j + 1: draft j + 1 of each sequence that asks for more, at
    // position (first position + j), its feature the head's output of this
    // pass.
    DraftBatchBuilder next(batch);
    features.clear();
    std::vector<int> next_picking;
    for (size_t i = 0; i < picking.size(); ++i) {
      const int s = picking[i];
      drafts[s].push_back(samples_.token_ids[i]);
      if (static_cast<int>(drafts[s].size()) == asked[s]) continue;
      next.AddRows(s, batch.positions[batch.query_start[s]] + j, {drafts[s].back()}, true,
                   block_size);
      features.insert(features.end(), head_hidden.begin() + i * row_bytes,
                      head_hidden.begin() + (i + 1) * row_bytes);
      next_picking.push_back(s);
    }
    picking = std::move(next_picking);
    pass = next.Take();
  }
  return drafts;
}

}  // namespace pagoda::worker
