#ifndef PAGODA_SCHEDULER_ENGINE_STEP_PLAN_BOUND_H_
#define PAGODA_SCHEDULER_ENGINE_STEP_PLAN_BOUND_H_

// The largest StepPlan the server's limits allow, computed before any worker
// starts, so a worker's receive limit can be checked against it.

#include <cstdint>

namespace pagoda::scheduler {

// The server's limits that size a step plan (BuildStepPlan, step_plan.h).
struct StepPlanLimits {
  int max_num_seqs = 0;            // Rows of one step.
  int max_num_batched_tokens = 0;  // Prompt tokens of one step, all rows.
  int max_model_len = 0;           // Prompt + output of one sequence.
  int block_size = 0;              // Tokens per KV block.
  int vocab_size = 0;              // Token ids are below it.
  int num_eos_token_ids = 0;       // Banned in every row before min_tokens.
};

// An upper bound on the serialized size (ByteSizeLong) of any StepPlan the
// server builds under `limits`, with every request at its per-request
// bounds (common/sampling_limits.h): the step's tokens (max_num_batched_tokens,
// or a whole max_model_len prompt, plus a decode token per row) and as many
// prompt logprob targets, each row's full block table, logit_bias
// and allowed ids, the banned ids of its bad words, stop ids and EOS, the
// sparse counts of a prompt and output of max_model_len tokens, a constraint's
// token mask (ceil(vocab_size / 32) words), prompt logprob targets for every
// token, and block moves (swap in, swap out, copy) for every block the rows
// can hold. The server sizes its workers' receive limit by it, so a worker
// refuses any message larger than its server can send.
// REQUIRES: every field positive but num_eos_token_ids (>= 0).
int64_t MaxStepPlanBytes(const StepPlanLimits& limits);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_STEP_PLAN_BOUND_H_
