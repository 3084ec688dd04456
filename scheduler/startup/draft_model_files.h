#ifndef PAGODA_SCHEDULER_STARTUP_DRAFT_MODEL_FILES_H_
#define PAGODA_SCHEDULER_STARTUP_DRAFT_MODEL_FILES_H_

// Start-up: speculative decoding's draft model directory checked against the
// target's files before any worker starts (the workers load its weights).

#include "absl/status/status.h"
#include "common/model_config.h"
#include "scheduler/spec/speculative_config.h"
#include "text/tokenizer.h"

namespace pagoda::scheduler {

// For method draft_model (OK for any other): the draft's config.json must
// describe a Llama-family model (LoadModelConfig's architectures) whose
// vocab_size is `target`'s; its positions set `speculative`'s
// draft_max_len (DraftModelMaxLen: fewer than `max_model_len` are logged
// and served, as vLLM's, rows past them verifying no drafts); when both
// the target (`target_tokenizer`, null for none) and the draft ship
// tokenizer files, their vocabulary sizes must match; at a
// `draft_tensor_parallel_size` above 1 its heads and intermediate size
// must split over that many ranks (CheckTensorParallelSplit).
// For method eagle: the head's config.json must give the target's
// hidden_size and vocab_size (a max_position_embeddings below
// `max_model_len` is raised to it, as vLLM's: common/eagle_head_positions.h,
// logged; a draft model's is not, but bounds its drafting), and its
// safetensors an fc.weight of [hidden, 2 * hidden], and at a
// `draft_tensor_parallel_size` above 1 its heads and intermediate size must
// split over that many ranks, as a draft model's. Method eagle3 also:
// the head's own keys as the worker checks them (common/
// eagle3_head_config.h: draft_vocab_size at most vocab_size,
// target_hidden_size, the aux layer ids within the target's layers), a
// draft vocabulary that splits over `draft_tensor_parallel_size` ranks
// (CheckVocabParallelSplit), lm_head.weight [draft_vocab_size, hidden], a
// d2t of I64 [draft_vocab_size] mapping into the target's vocabulary, and
// an fc.weight of [hidden, 3 * hidden] unless the head has no aux hidden
// states. The worker checks the other tensors as it loads them.
// For a draft model or EAGLE head with vLLM's max_model_len key: at most
// --max-model-len and the draft's max_position_embeddings (a head's are
// raised to --max-model-len), and then `speculative`'s draft_max_len.
// INVALID_ARGUMENT, one line naming both values, otherwise.
absl::Status CheckDraftModelFiles(SpeculativeConfig* speculative, const ModelConfig& target,
                                  int max_model_len, const Tokenizer* target_tokenizer,
                                  int draft_tensor_parallel_size = 1);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_STARTUP_DRAFT_MODEL_FILES_H_
