#ifndef PAGODA_WORKER_PROMPT_LOGPROBS_H_
#define PAGODA_WORKER_PROMPT_LOGPROBS_H_

// Prompt logprobs (vLLM's prompt_logprobs): the log-probability of each
// prompt token under the raw logits of the row before it, with the most
// likely tokens there. The forward pass computes logits only for the sampled
// rows; this scores the other rows of a chunk afterwards, from the hidden
// states the pass left, in slices that fit the logits region.

#include <cstdint>

#include "absl/types/span.h"
#include "pagoda/worker/v1/worker.pb.h"
#include "worker/backend.h"
#include "worker/flat_batch.h"
#include "worker/llama_model.h"

namespace pagoda::worker {

// Fills `out` from one row of raw logits (host memory): the log_softmax
// (in double) of `token_id` and of the `num_top` largest logits, descending,
// lowest id first on ties, as the sampler's logprobs. NaN counts as -inf.
// REQUIRES: 0 <= token_id < logits.size(), 0 <= num_top.
void ScorePromptRow(absl::Span<const float> logits, int32_t token_id, int num_top,
                    pagoda::worker::v1::PromptTokenLogprob* out);

// Appends to `result` one PromptLogprobs per entry of
// batch.prompt_logprob_rows, in order: each row's logits computed by
// model->RowLogits over output.final_hidden, downloaded and scored against
// the plan's prompt_logprob_token_ids. Overwrites the step's logits, so it
// runs after sampling. On a model that splits its vocabulary every rank
// calls it (RowLogits is a collective), with `result` null off rank 0 (no
// scoring). A failed collective's status is returned. REQUIRES: rank 0 or
// model->splits_vocab(); `output` is model->Forward(batch)'s (final_hidden
// set); `batch` came from FlattenStepPlan(plan, ...).
absl::Status AppendPromptLogprobs(const pagoda::worker::v1::StepPlan& plan, const FlatBatch& batch,
                                  const ForwardOutput& output, LlamaModel* model, Backend* backend,
                                  pagoda::worker::v1::StepResult* result);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_PROMPT_LOGPROBS_H_
