// A PEFT LoRA adapter directory (adapter_config.json +
// adapter_model.safetensors) loaded into f32 A and B matrices per layer and
// projection, validated against the base model it will run on.
#ifndef PAGODA_COMMON_LORA_ADAPTER_H_
#define PAGODA_COMMON_LORA_ADAPTER_H_

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/lora_adapter_config.h"
#include "common/model_config.h"

namespace pagoda {

// One projection's low-rank update, ΔW = scale · B · A, in f32 row-major:
// A [rank, in], B [out, rank] (PEFT's lora_A.weight and lora_B.weight).
struct LoraMatrices {
  int rank = 0;
  int64_t in = 0;
  int64_t out = 0;
  std::vector<float> a;
  std::vector<float> b;
};

// PEFT's trainable tokens of one module: token ids[i]'s row is replaced
// outright by rows[i * hidden, (i + 1) * hidden) (f32; PEFT names them
// trainable_tokens_delta, but they are whole rows, not deltas).
struct LoraTokenRows {
  std::vector<int32_t> ids;
  std::vector<float> rows;  // [ids.size(), hidden].
};

struct LoraAdapter {
  LoraAdapterConfig config;
  float scale = 0;  // config.Scale(), the same for every projection.
  // layers[l][module]: absent where the adapter leaves the projection alone.
  std::vector<std::array<std::optional<LoraMatrices>, kNumLoraModules>> layers;
  // The token embedding's update as a map from a one-hot token to a hidden
  // row: A [rank, vocab] (PEFT's lora_embedding_A), B [hidden, rank]
  // (lora_embedding_B); token t's row gains scale · B A[:, t].
  std::optional<LoraMatrices> embed_tokens;
  // The output head's: A [rank, hidden], B [vocab, rank] (lora_A, lora_B).
  std::optional<LoraMatrices> lm_head;
  // trainable_token_indices: embedding rows that replace the (updated)
  // embedding's for those tokens, and head rows whose product with the
  // hidden state replaces those tokens' logits. On a base with tied
  // embeddings the head's are the embedding's (PEFT ties them too).
  std::optional<LoraTokenRows> embed_token_rows;
  std::optional<LoraTokenRows> lm_head_token_rows;
  // Bytes of every A and B and the token rows (f32), for the host cache's
  // accounting.
  size_t bytes() const;
};

// PEFT's tensor name for a layer's projection, without the ".weight":
// "base_model.model.model.layers.3.self_attn.q_proj.lora_A".
std::string PeftLoraTensorPrefix(int layer, LoraModule module);

// Loads `dir`/adapter_config.json and `dir`/adapter_model.safetensors.
// Every refusal is one line naming the file and the thing: the config's
// (ParseLoraAdapterConfig, rank above `max_rank` included); a tensor name that
// is not a layer's lora_A/lora_B of one of the seven projections, or of a
// layer past the base model's, or of a projection target_modules does not
// list, nor embed_tokens' lora_embedding_A/B or lm_head's lora_A/B when
// listed ("unexpected tensor"); a target projection of a transformed layer
// without its A or B ("missing tensor"); a shape other than A [r, in] and
// B [out, r] for the base model (an embedding's vocabulary must be the base
// model's, as vLLM requires); a layers_to_transform entry past the
// base model's layers; a dtype other than F32/F16/BF16; a
// corrupt safetensors file; a non-finite value. Trainable tokens (at most
// `max_trainable_tokens` per module, ParseLoraAdapterConfig) need their
// module's ...token_adapter.trainable_tokens_delta [n, hidden], ids inside
// the base vocabulary, and on a tied base no rows of lm_head's own.
absl::StatusOr<LoraAdapter> LoadLoraAdapter(const std::string& dir, const ModelConfig& base,
                                            int max_rank, int max_trainable_tokens = 0);

// PEFT's tensor names of embed_tokens' and lm_head's trainable tokens.
inline constexpr char kPeftEmbedTokenRows[] =
    "base_model.model.model.embed_tokens.token_adapter.trainable_tokens_delta";
inline constexpr char kPeftLmHeadTokenRows[] =
    "base_model.model.lm_head.token_adapter.trainable_tokens_delta";

}  // namespace pagoda

#endif  // PAGODA_COMMON_LORA_ADAPTER_H_
