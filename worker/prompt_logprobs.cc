#include "worker/prompt_logprobs.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "worker/cpu/simd.h"

namespace pagoda::worker {
namespace {

using pagoda::worker::v1::PromptTokenLogprob;

float LogitOrMinusInfinity(float x) { return std::isnan(x) ? -INFINITY : x; }

// Whether (a, id_a) ranks before (b, id_b): larger logit, then lower id.
bool RanksBefore(float a, int32_t id_a, float b, int32_t id_b) {
  return a > b || (a == b && id_a < id_b);
}

// The `count` highest-ranked token ids of the row, best first. A short
// insertion list: count is at most kMaxTopLogprobs.
std::vector<int32_t> TopIds(absl::Span<const float> logits, int count) {
  std::vector<int32_t> top;
  if (count <= 0) return top;
  top.reserve(count + 1);
  for (int32_t id = 0; id < static_cast<int32_t>(logits.size()); ++id) {
    const float x = LogitOrMinusInfinity(logits[id]);
    if (static_cast<int>(top.size()) == count &&
        !RanksBefore(x, id, LogitOrMinusInfinity(logits[top.back()]), top.back())) {
      continue;
    }
    auto at = std::find_if(top.begin(), top.end(), [&](int32_t other) {
      return RanksBefore(x, id, LogitOrMinusInfinity(logits[other]), other);
    });
    top.insert(at, id);
    if (static_cast<int>(top.size()) > count) top.pop_back();
  }
  return top;
}

}  // namespace

void ScorePromptRow(absl::Span<const float> logits, int32_t token_id, int num_top,
                    PromptTokenLogprob* out) {
  float max_logit = -INFINITY;
  for (float x : logits) max_logit = std::max(max_logit, LogitOrMinusInfinity(x));
  double sum = 0.0;
  if (std::isfinite(max_logit)) {  // In float64, NaN as -inf, as the sampler's (simd.h).
    static const auto exp_sum_f64 = BestSimdKernels().exp_sum_f64;
    sum = exp_sum_f64(logits.data(), max_logit, logits.size());
  }
  const double log_normalizer = max_logit + std::log(sum);
  auto logprob = [&](int32_t id) {
    return static_cast<float>(LogitOrMinusInfinity(logits[id]) - log_normalizer);
  };
  out->set_token_id(token_id);
  out->set_logprob(logprob(token_id));
  for (int32_t id : TopIds(logits, std::min<int>(num_top, static_cast<int>(logits.size())))) {
    auto* top = out->add_top();
    top->set_token_id(id);
    top->set_logprob(logprob(id));
  }
}

absl::Status AppendPromptLogprobs(const pagoda::worker::v1::StepPlan& plan, const FlatBatch& batch,
                                  const ForwardOutput& output, LlamaModel* model, Backend* backend,
                                  pagoda::worker::v1::StepResult* result) {
  const int vocab = model->config().vocab_size;
  const int slice_capacity = output.row_logits_capacity;
  std::vector<float> host(static_cast<size_t>(slice_capacity) * vocab);
  for (const FlatBatch::PromptLogprobRows& rows : batch.prompt_logprob_rows) {
    const pagoda::worker::v1::SequenceStep& step = plan.sequences(rows.sequence);
    auto* entry = result != nullptr ? result->add_prompt_logprobs() : nullptr;
    if (entry != nullptr) entry->set_seq_id(step.seq_id());
    for (int first = 0; first < rows.num_rows; first += slice_capacity) {
      const int count = std::min(slice_capacity, rows.num_rows - first);
      const auto* hidden = static_cast<const char*>(output.final_hidden) +
                           static_cast<size_t>(rows.first_row + first) * model->hidden_row_bytes();
      const int32_t* row_slots =
          batch.uses_lora ? batch.lora_slots.data() + rows.first_row + first : nullptr;
      if (absl::Status s = model->RowLogits(hidden, count, output.row_logits, row_slots); !s.ok()) {
        return s;
      }
      if (entry == nullptr) continue;  // A rank that only computes its rows.
      backend->DownloadBytes(output.row_logits, host.data(),
                             static_cast<size_t>(count) * vocab * sizeof(float));
      for (int r = 0; r < count; ++r) {
        ScorePromptRow(absl::MakeConstSpan(host.data() + static_cast<size_t>(r) * vocab, vocab),
                       step.prompt_logprob_token_ids(first + r), rows.num_top, entry->add_tokens());
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace pagoda::worker
