// A PEFT LoRA adapter directory as the server checks it before registering
// it (--lora-modules, POST /v1/load_lora_adapter) and every worker reads it
// into a slot (LoadLoraAdapter), then slices it for tensor parallelism
// (ShardLoraAdapter). Input: a mode byte (bit 0: the base model ties its
// embeddings), adapter_config.json's bytes, a NUL byte, then
// adapter_model.safetensors' bytes. The base is a tiny Llama: vocabulary 40,
// hidden 12, intermediate 20, 2 layers, 4 heads of 3, 2 KV heads; at most
// rank 16 and 8 trainable tokens a module.
#include <cmath>

#include "common/lora_adapter.h"
#include "common/lora_shard.h"
#include "common/tensor_parallel_plan.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using pagoda::fuzz::Check;

constexpr int kMaxRank = 16;
constexpr int kMaxTrainableTokens = 8;

pagoda::ModelConfig TinyBase(bool tied) {
  pagoda::ModelConfig base;
  base.vocab_size = 40;
  base.hidden_size = 12;
  base.intermediate_size = 20;
  base.num_hidden_layers = 2;
  base.num_attention_heads = 4;
  base.num_key_value_heads = 2;
  base.head_dim = 3;
  base.tie_word_embeddings = tied;
  return base;
}

bool AllFinite(const std::vector<float>& values) {
  for (float v : values) {
    if (!std::isfinite(v)) return false;
  }
  return true;
}

void CheckMatrices(const pagoda::LoraMatrices& m, int64_t in, int64_t out) {
  Check(m.rank >= 1 && m.rank <= kMaxRank, "rank within the max");
  Check(m.in == in && m.out == out, "the base's shape");
  Check(m.a.size() == static_cast<size_t>(m.rank * in), "A is [rank, in]");
  Check(m.b.size() == static_cast<size_t>(out * m.rank), "B is [out, rank]");
  Check(AllFinite(m.a) && AllFinite(m.b), "finite A and B");
}

void CheckTokenRows(const pagoda::LoraTokenRows& rows, const pagoda::ModelConfig& base) {
  Check(!rows.ids.empty() && rows.ids.size() <= kMaxTrainableTokens, "1 to max trainable tokens");
  for (size_t i = 0; i < rows.ids.size(); ++i) {
    Check(rows.ids[i] >= 0 && rows.ids[i] < base.vocab_size, "token id in the vocabulary");
    for (size_t j = 0; j < i; ++j) Check(rows.ids[j] != rows.ids[i], "token ids unique");
  }
  Check(rows.rows.size() == rows.ids.size() * base.hidden_size, "a hidden row per token");
  Check(AllFinite(rows.rows), "finite rows");
}

void CheckAdapter(const pagoda::LoraAdapter& adapter, const pagoda::ModelConfig& base) {
  Check(std::isfinite(adapter.scale), "finite scale");
  Check(static_cast<int>(adapter.layers.size()) == base.num_hidden_layers, "one entry a layer");
  for (const auto& layer : adapter.layers) {
    for (pagoda::LoraModule module : pagoda::kAllLoraModules) {
      const auto& pair = layer[static_cast<int>(module)];
      const pagoda::LinearShape shape = pagoda::LoraModuleShape(base, module);
      if (pair) CheckMatrices(*pair, shape.in, shape.out);
    }
  }
  if (adapter.embed_tokens) CheckMatrices(*adapter.embed_tokens, base.vocab_size, base.hidden_size);
  if (adapter.lm_head) CheckMatrices(*adapter.lm_head, base.hidden_size, base.vocab_size);
  if (adapter.embed_token_rows) CheckTokenRows(*adapter.embed_token_rows, base);
  if (adapter.lm_head_token_rows) CheckTokenRows(*adapter.lm_head_token_rows, base);
  if (base.tie_word_embeddings) {
    Check(adapter.embed_token_rows.has_value() == adapter.lm_head_token_rows.has_value(),
          "a tied head takes the embedding's rows");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = pagoda::fuzz::ScratchDir("lora_adapter");
  if (size == 0) return 0;
  const pagoda::ModelConfig base = TinyBase((data[0] & 1) != 0);
  const std::string_view input = pagoda::fuzz::AsText(data + 1, size - 1);
  const size_t split = input.find('\0');
  pagoda::fuzz::WriteFile(dir + "/adapter_config.json", input.substr(0, split));
  pagoda::fuzz::WriteFile(dir + "/adapter_model.safetensors",
                          split == std::string_view::npos ? "" : input.substr(split + 1));
  absl::StatusOr<pagoda::LoraAdapter> adapter =
      pagoda::LoadLoraAdapter(dir, base, kMaxRank, kMaxTrainableTokens);
  if (!adapter.ok()) return 0;
  CheckAdapter(*adapter, base);
  for (int rank = 0; rank < 2; ++rank) {
    absl::StatusOr<pagoda::TensorParallelShard> shard =
        pagoda::PlanTensorParallelShard(base, rank, 2);
    Check(shard.ok(), "the tiny base splits over two ranks");
    Check(pagoda::ShardLoraAdapter(*adapter, base, *shard).ok(), "an accepted adapter shards");
  }
  return 0;
}
