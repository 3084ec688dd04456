#ifndef PAGODA_COMMON_EAGLE3_HEAD_CONFIG_H_
#define PAGODA_COMMON_EAGLE3_HEAD_CONFIG_H_

// An EAGLE-3 speculative-decoding head's own settings, as vLLM's
// Eagle3LlamaForCausalLM and its LlamaModel read them from the head's
// config.json (the keys ModelConfig does not read), and its d2t mapping.
// Read and checked against the target twice with the same rules: by the
// server at start (scheduler/startup/draft_model_files.h), before any
// worker starts, and by the worker as it loads the head.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_config.h"
#include "common/safetensors.h"

namespace pagoda {

struct Eagle3HeadConfig {
  // draft_vocab_size: the rows of the head's lm_head; the head's vocab_size
  // when absent or null, as vLLM defaults it.
  int64_t draft_vocab = 0;
  // eagle_aux_hidden_state_layer_ids, defaulting to (2, L / 2, L - 3) of
  // the target's L layers; empty without aux hidden states.
  std::vector<int> aux_layers;
  bool norm_before_residual = false;
  // eagle_config.use_aux_hidden_state: false for a head with no fc, fed the
  // target's final-normed hidden state.
  bool use_aux_hidden_state = true;
};

// The settings of the EAGLE-3 head in `head_dir` (whose config.json gave
// `head`) for `target`. INVALID_ARGUMENT in one line starting "EAGLE-3
// head: " for config.json that is not a JSON object, an integer key
// (draft_vocab_size, target_hidden_size) that is not one in
// [1, 2^31 - 1], a flag that is not a boolean, layer ids that are not a list
// of three integers, and for a head that does not fit the target:
// hidden_size or target_hidden_size other than the target's hidden_size, a
// vocab_size other than the target's, a draft_vocab_size above it, no
// decoder layer, or aux layer ids outside the target's layers, e.g.
// "EAGLE-3 head: draft_vocab_size 300 exceeds vocab_size 256".
absl::StatusOr<Eagle3HeadConfig> LoadEagle3HeadConfig(const std::string& head_dir,
                                                      const ModelConfig& head,
                                                      const ModelConfig& target);

// Draft id d's target id, d + d2t[d], for each of `draft_vocab` draft ids
// (vLLM's compute_logits scatters draft logits there); the identity when
// `store` has no d2t, as in vLLM (draft_vocab is at most `vocab`, checked
// with the config). INVALID_ARGUMENT in one line starting "EAGLE-3 head: "
// when d2t is not I64 [draft_vocab] or maps a draft id outside [0, vocab).
// (t2d is not read, as vLLM skips it.)
absl::StatusOr<std::vector<int32_t>> ReadEagle3DraftToTarget(const WeightStore& store,
                                                             int64_t draft_vocab, int64_t vocab);

}  // namespace pagoda

#endif  // PAGODA_COMMON_EAGLE3_HEAD_CONFIG_H_
