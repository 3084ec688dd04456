#ifndef PAGODA_COMMON_MODEL_CONFIG_H_
#define PAGODA_COMMON_MODEL_CONFIG_H_

// A model directory's config.json (and generation_config.json) read into one
// ModelConfig: the architecture facts the server checks its flags against and
// the worker builds its model from. Every field is bounded: the file is hostile.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/rope_scaling.h"

namespace pagoda {

// The architecture of a Llama-family decoder, read from HF `config.json`
// (and `generation_config.json` for EOS ids when present).
struct ModelConfig {
  std::string architecture;  // "LlamaForCausalLM" or "Qwen2ForCausalLM".
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;  // Defaults to num_attention_heads.
  int head_dim = 0;             // Defaults to hidden_size / num_attention_heads.
  int max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v bias (always true for Qwen2).
  std::string torch_dtype;      // As written; informational.
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;  // generation_config.json wins over config.json.
};

// Reads and validates `model_dir`/config.json (and generation_config.json).
// Errors name the file and the field: missing file, bad JSON, unsupported
// architecture, non-positive sizes, heads not dividing, unknown rope scaling.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir);

}  // namespace pagoda

#endif  // PAGODA_COMMON_MODEL_CONFIG_H_
