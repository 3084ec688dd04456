#include "common/lora_adapter.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/safetensors.h"

namespace pagoda {
namespace {

constexpr char kConfigFile[] = "adapter_config.json";
constexpr char kWeightsFile[] = "adapter_model.safetensors";
constexpr char kPrefix[] = "base_model.model.model.layers.";
// PEFT's names of the embedding's and the head's matrices (an embedding's
// are parameters of their own, without ".weight").
constexpr char kEmbedA[] = "base_model.model.model.embed_tokens.lora_embedding_A";
constexpr char kEmbedB[] = "base_model.model.model.embed_tokens.lora_embedding_B";
constexpr char kLmHeadA[] = "base_model.model.lm_head.lora_A.weight";
constexpr char kLmHeadB[] = "base_model.model.lm_head.lora_B.weight";
constexpr size_t kMaxConfigBytes = 1 << 20;

// (layer, module, is_b) of a PEFT LoRA tensor name; nullopt when the name
// is anything else.
struct ParsedName {
  int layer = 0;
  LoraModule module = LoraModule::kQ;
  bool is_b = false;
};

std::optional<ParsedName> ParsePeftName(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kPrefix)) return std::nullopt;
  std::vector<absl::string_view> parts = absl::StrSplit(name, '.');
  // N . self_attn|mlp . x_proj . lora_A|lora_B . weight
  if (parts.size() != 5 || parts[4] != "weight") return std::nullopt;
  ParsedName parsed;
  if (!absl::SimpleAtoi(parts[0], &parsed.layer) || parsed.layer < 0) return std::nullopt;
  std::optional<LoraModule> module = FindLoraModule(parts[2]);
  if (!module || LoraModuleParent(*module) != parts[1]) return std::nullopt;
  parsed.module = *module;
  if (parts[3] != "lora_A" && parts[3] != "lora_B") return std::nullopt;
  parsed.is_b = parts[3] == "lora_B";
  return parsed;
}

absl::StatusOr<std::string> ReadConfigText(const std::string& path) {
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  if (error) return absl::NotFoundError(absl::StrCat(path, ": cannot read: ", error.message()));
  if (size > kMaxConfigBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": larger than 1 MiB"));
  }
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  if (!file) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  return text.str();
}

bool Targets(const LoraAdapterConfig& config, int layer, LoraModule module) {
  if (!config.layers.empty() &&
      std::find(config.layers.begin(), config.layers.end(), layer) == config.layers.end()) {
    return false;
  }
  if (config.targets_from_tensors) return true;
  return std::find(config.targets.begin(), config.targets.end(), module) != config.targets.end();
}

// The targets whose tensors a file holds.
struct PresentTargets {
  std::set<std::pair<int, LoraModule>> projections;
  bool embed_tokens = false;
  bool lm_head = false;
  bool token_rows = false;
};

// Marks `name` in `present` when it is embed_tokens' or lm_head's and the
// config lets that target in (true too for the trainable-token rows the
// config lists); false for any other name.
bool MarkVocabularyTensor(const std::string& name, const LoraAdapterConfig& config,
                          PresentTargets* present) {
  if (name == kPeftEmbedTokenRows || name == kPeftLmHeadTokenRows) {
    present->token_rows = true;
    return !(name == kPeftEmbedTokenRows ? config.embed_token_ids : config.lm_head_token_ids)
                .empty();
  }
  if (name == kEmbedA || name == kEmbedB) {
    present->embed_tokens = true;
    return config.embed_tokens || config.targets_from_tensors;
  }
  if (name == kLmHeadA || name == kLmHeadB) {
    present->lm_head = true;
    return config.lm_head || config.targets_from_tensors;
  }
  return false;
}

// Checks every tensor name; returns the targets present.
absl::StatusOr<PresentTargets> CheckNames(const WeightStore& store, const std::string& path,
                                          const LoraAdapterConfig& config,
                                          const ModelConfig& base) {
  PresentTargets present;
  for (const std::string& name : store.Names()) {
    std::optional<ParsedName> parsed = ParsePeftName(name);
    const bool expected = parsed ? parsed->layer < base.num_hidden_layers &&
                                       Targets(config, parsed->layer, parsed->module)
                                 : MarkVocabularyTensor(name, config, &present);
    if (!expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": unexpected tensor \"", name.substr(0, 128),
          "\" (expected only lora_A/lora_B of the target projections of the base model's ",
          base.num_hidden_layers,
          " layers, of lm_head, embed_tokens' lora_embedding_A/B, and the trainable tokens' rows "
          "trainable_token_indices lists)"));
    }
    if (parsed) present.projections.insert({parsed->layer, parsed->module});
  }
  if (present.projections.empty() && !present.embed_tokens && !present.lm_head &&
      !present.token_rows) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no LoRA tensors"));
  }
  return present;
}

absl::StatusOr<std::vector<float>> ReadMatrix(const WeightStore& store, const std::string& path,
                                              const std::string& name, std::vector<int64_t> shape) {
  if (!store.Has(name)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": missing tensor \"", name, "\""));
  }
  auto values = store.GetF32(name, shape);
  if (!values.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", values.status().message()));
  }
  for (float v : *values) {
    if (!std::isfinite(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor \"", name, "\" holds a non-finite value"));
    }
  }
  return values;
}

absl::StatusOr<LoraMatrices> ReadPairNamed(const WeightStore& store, const std::string& path,
                                           const std::string& a_name, const std::string& b_name,
                                           int rank, LinearShape shape) {
  LoraMatrices pair{rank, shape.in, shape.out, {}, {}};
  auto a = ReadMatrix(store, path, a_name, {rank, shape.in});
  if (!a.ok()) return a.status();
  auto b = ReadMatrix(store, path, b_name, {shape.out, rank});
  if (!b.ok()) return b.status();
  pair.a = *std::move(a);
  pair.b = *std::move(b);
  return pair;
}

absl::StatusOr<LoraMatrices> ReadPair(const WeightStore& store, const std::string& path, int layer,
                                      LoraModule module, int rank, const ModelConfig& base) {
  const std::string prefix = PeftLoraTensorPrefix(layer, module);
  return ReadPairNamed(store, path, absl::StrCat(prefix, "_A.weight"),
                       absl::StrCat(prefix, "_B.weight"), rank, LoraModuleShape(base, module));
}

// embed_tokens' and lm_head's updates, where the config lists them (or,
// with a string target_modules, where the file holds them).
absl::Status ReadVocabularyPairs(const WeightStore& store, const std::string& path,
                                 const PresentTargets& present, const ModelConfig& base,
                                 LoraAdapter* adapter) {
  const LoraAdapterConfig& config = adapter->config;
  const int64_t vocab = base.vocab_size, hidden = base.hidden_size;
  if (config.targets_from_tensors ? present.embed_tokens : config.embed_tokens) {
    auto pair = ReadPairNamed(store, path, kEmbedA, kEmbedB, config.rank, {hidden, vocab});
    if (!pair.ok()) return pair.status();
    adapter->embed_tokens = *std::move(pair);
  }
  if (config.targets_from_tensors ? present.lm_head : config.lm_head) {
    auto pair = ReadPairNamed(store, path, kLmHeadA, kLmHeadB, config.rank, {vocab, hidden});
    if (!pair.ok()) return pair.status();
    adapter->lm_head = *std::move(pair);
  }
  return absl::OkStatus();
}

// One module's trainable-token rows: `ids`' replacement rows, [n, hidden].
absl::StatusOr<LoraTokenRows> ReadTokenRows(const WeightStore& store, const std::string& path,
                                            const char* name, const std::vector<int32_t>& ids,
                                            const ModelConfig& base) {
  for (int32_t id : ids) {
    if (id >= base.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": trainable token id ", id, " is outside the base model's ",
                       base.vocab_size, "-token vocabulary"));
    }
  }
  auto rows = ReadMatrix(store, path, name, {static_cast<int64_t>(ids.size()), base.hidden_size});
  if (!rows.ok()) return rows.status();
  return LoraTokenRows{ids, *std::move(rows)};
}

// trainable_token_indices' rows. A tied base has one matrix for the
// embedding and the head: its head takes the embedding's rows, and rows of
// the head's own would change that shared matrix two ways (refused).
absl::Status ReadTrainableTokens(const WeightStore& store, const std::string& path,
                                 const ModelConfig& base, LoraAdapter* adapter) {
  const LoraAdapterConfig& config = adapter->config;
  if (base.tie_word_embeddings && !config.lm_head_token_ids.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the base model ties lm_head to embed_tokens, so lm_head's trainable tokens are "
              "embed_tokens' (list them there)"));
  }
  for (const auto& [ids, name, rows] :
       {std::tuple{&config.embed_token_ids, kPeftEmbedTokenRows, &adapter->embed_token_rows},
        std::tuple{&config.lm_head_token_ids, kPeftLmHeadTokenRows,
                   &adapter->lm_head_token_rows}}) {
    if (ids->empty()) continue;
    auto read = ReadTokenRows(store, path, name, *ids, base);
    if (!read.ok()) return read.status();
    *rows = *std::move(read);
  }
  if (base.tie_word_embeddings) adapter->lm_head_token_rows = adapter->embed_token_rows;
  return absl::OkStatus();
}

}  // namespace

size_t LoraAdapter::bytes() const {
  size_t total = 0;
  for (const auto* pair : {&embed_tokens, &lm_head}) {
    if (*pair) total += ((*pair)->a.size() + (*pair)->b.size()) * sizeof(float);
  }
  for (const auto* rows : {&embed_token_rows, &lm_head_token_rows}) {
    if (*rows) total += (*rows)->rows.size() * sizeof(float) + (*rows)->ids.size() * 4;
  }
  for (const auto& layer : layers) {
    for (const auto& pair : layer) {
      if (pair) total += (pair->a.size() + pair->b.size()) * sizeof(float);
    }
  }
  return total;
}

std::string PeftLoraTensorPrefix(int layer, LoraModule module) {
  return absl::StrCat(kPrefix, layer, ".", LoraModuleParent(module), ".", LoraModuleName(module),
                      ".lora");
}

absl::StatusOr<LoraAdapter> LoadLoraAdapter(const std::string& dir, const ModelConfig& base,
                                            int max_rank, int max_trainable_tokens) {
  const std::string config_path = (std::filesystem::path(dir) / kConfigFile).string();
  auto text = ReadConfigText(config_path);
  if (!text.ok()) return text.status();
  auto config = ParseLoraAdapterConfig(*text, config_path, max_rank, max_trainable_tokens);
  if (!config.ok()) return config.status();

  const std::string weights_path = (std::filesystem::path(dir) / kWeightsFile).string();
  auto store = WeightStore::OpenFile(weights_path);
  if (!store.ok()) return store.status();
  for (int layer : config->layers) {
    if (layer < 0 || layer >= base.num_hidden_layers) {
      return absl::InvalidArgumentError(
          absl::StrCat(config_path, ": layers_to_transform names layer ", layer,
                       "; the base model has ", base.num_hidden_layers));
    }
  }
  auto present = CheckNames(**store, weights_path, *config, base);
  if (!present.ok()) return present.status();

  LoraAdapter adapter;
  adapter.config = *config;
  adapter.scale = static_cast<float>(config->Scale());
  adapter.layers.resize(base.num_hidden_layers);
  for (int layer = 0; layer < base.num_hidden_layers; ++layer) {
    for (LoraModule module : kAllLoraModules) {
      // A listed target of a transformed layer must be there; a string
      // target_modules lets the tensors present decide.
      const bool wanted = config->targets_from_tensors
                              ? present->projections.count({layer, module}) > 0
                              : Targets(*config, layer, module);
      if (!wanted) continue;
      auto pair = ReadPair(**store, weights_path, layer, module, config->rank, base);
      if (!pair.ok()) return pair.status();
      adapter.layers[layer][static_cast<int>(module)] = *std::move(pair);
    }
  }
  if (absl::Status s = ReadVocabularyPairs(**store, weights_path, *present, base, &adapter);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadTrainableTokens(**store, weights_path, base, &adapter); !s.ok()) {
    return s;
  }
  return adapter;
}

}  // namespace pagoda
