#include "common/eagle3_head_config.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace pagoda {
namespace {

absl::Status Eagle3Refusal(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("EAGLE-3 head: ", what));
}

// The keys as config.json gives them (0 and empty: absent).
struct Eagle3Keys {
  int64_t draft_vocab = 0;
  int64_t target_hidden = 0;
  std::vector<int> aux_layers;
  bool norm_before_residual = false;
  bool use_aux_hidden_state = true;
};

// `object`[key] into *out when present and not null; a value that is not a
// boolean is refused naming `name` (nlohmann's value() would throw).
absl::Status ReadBool(const nlohmann::json& object, const char* key, const char* name, bool* out) {
  if (!object.contains(key) || object[key].is_null()) return absl::OkStatus();
  if (!object[key].is_boolean()) return Eagle3Refusal(absl::StrCat(name, " is not a boolean"));
  *out = object[key].get<bool>();
  return absl::OkStatus();
}

// `json`[key] into *out when present and not null: an integer in
// [1, 2^31 - 1] (a size the worker indexes with int).
absl::Status ReadPositiveInt(const nlohmann::json& json, const char* key, int64_t* out) {
  if (!json.contains(key) || json[key].is_null()) return absl::OkStatus();
  if (!json[key].is_number_integer()) return Eagle3Refusal(absl::StrCat(key, " is not an integer"));
  const int64_t value = json[key].get<int64_t>();
  if (value < 1 || value > std::numeric_limits<int32_t>::max()) {
    return Eagle3Refusal(absl::StrCat(key, " ", value, " is out of range"));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status ReadLayerIds(const nlohmann::json& json, std::vector<int>* out) {
  if (!json.contains("eagle_aux_hidden_state_layer_ids")) return absl::OkStatus();
  const nlohmann::json& ids = json["eagle_aux_hidden_state_layer_ids"];
  constexpr char kNotIds[] = "eagle_aux_hidden_state_layer_ids is not a list of 3 layer ids";
  if (!ids.is_array() || ids.size() != 3) return Eagle3Refusal(kNotIds);
  for (const nlohmann::json& id : ids) {
    if (!id.is_number_integer() || id.get<int64_t>() < -1 || id.get<int64_t>() > 1 << 20) {
      return Eagle3Refusal(kNotIds);
    }
    out->push_back(id.get<int>());
  }
  return absl::OkStatus();
}

absl::StatusOr<Eagle3Keys> ReadEagle3Keys(const std::string& head_dir) {
  std::ifstream in(std::filesystem::path(head_dir) / "config.json");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json json = nlohmann::json::parse(text.str(), nullptr, false);
  if (!json.is_object()) return Eagle3Refusal("config.json is not a JSON object");
  Eagle3Keys keys;
  for (auto [key, out] : {std::pair<const char*, int64_t*>{"draft_vocab_size", &keys.draft_vocab},
                          {"target_hidden_size", &keys.target_hidden}}) {
    if (absl::Status s = ReadPositiveInt(json, key, out); !s.ok()) return s;
  }
  if (absl::Status s = ReadLayerIds(json, &keys.aux_layers); !s.ok()) return s;
  if (absl::Status s = ReadBool(json, "norm_before_residual", "norm_before_residual",
                                &keys.norm_before_residual);
      !s.ok()) {
    return s;
  }
  if (json.contains("eagle_config") && json["eagle_config"].is_object()) {
    if (absl::Status s = ReadBool(json["eagle_config"], "use_aux_hidden_state",
                                  "eagle_config.use_aux_hidden_state", &keys.use_aux_hidden_state);
        !s.ok()) {
      return s;
    }
  }
  return keys;
}

absl::Status CheckAgainstTarget(const ModelConfig& head, const Eagle3Keys& keys,
                                const std::vector<int>& aux_layers, const ModelConfig& target) {
  if (head.hidden_size != target.hidden_size) {
    return Eagle3Refusal(absl::StrCat("hidden_size ", head.hidden_size,
                                      " differs from the target's ", target.hidden_size));
  }
  if (keys.target_hidden != 0 && keys.target_hidden != target.hidden_size) {
    return Eagle3Refusal(absl::StrCat("target_hidden_size ", keys.target_hidden,
                                      " differs from the target's hidden_size ",
                                      target.hidden_size));
  }
  if (head.vocab_size != target.vocab_size) {
    return Eagle3Refusal(absl::StrCat("vocab_size ", head.vocab_size, " differs from the target's ",
                                      target.vocab_size));
  }
  if (keys.draft_vocab > head.vocab_size) {
    return Eagle3Refusal(absl::StrCat("draft_vocab_size ", keys.draft_vocab, " exceeds vocab_size ",
                                      head.vocab_size));
  }
  if (head.num_hidden_layers < 1) {
    return Eagle3Refusal("num_hidden_layers 0: the head has no decoder layer");
  }
  for (int layer : aux_layers) {
    if (layer < 0 || layer >= target.num_hidden_layers) {
      return Eagle3Refusal(
          absl::StrCat("eagle_aux_hidden_state_layer_ids [", absl::StrJoin(aux_layers, ", "),
                       "] are not all layers of the target's ", target.num_hidden_layers));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Eagle3HeadConfig> LoadEagle3HeadConfig(const std::string& head_dir,
                                                      const ModelConfig& head,
                                                      const ModelConfig& target) {
  absl::StatusOr<Eagle3Keys> keys = ReadEagle3Keys(head_dir);
  if (!keys.ok()) return keys.status();
  Eagle3HeadConfig config;
  config.draft_vocab = keys->draft_vocab > 0 ? keys->draft_vocab : head.vocab_size;
  config.norm_before_residual = keys->norm_before_residual;
  config.use_aux_hidden_state = keys->use_aux_hidden_state;
  const int target_layers = target.num_hidden_layers;
  if (!keys->use_aux_hidden_state) {
    // vLLM reads no layer ids then: no fc, no aux rows.
  } else if (keys->aux_layers.empty()) {
    config.aux_layers = {2, target_layers / 2, target_layers - 3};
  } else {
    config.aux_layers = keys->aux_layers;
  }
  if (absl::Status s = CheckAgainstTarget(head, *keys, config.aux_layers, target); !s.ok()) {
    return s;
  }
  return config;
}

absl::StatusOr<std::vector<int32_t>> ReadEagle3DraftToTarget(const WeightStore& store,
                                                             int64_t draft_vocab, int64_t vocab) {
  std::vector<int32_t> targets(draft_vocab);
  if (!store.Has("d2t")) {
    // vLLM's Eagle3 head starts from an all-zero d2t and loads one only
    // when the checkpoint has it: draft id d is then target id d.
    for (int64_t d = 0; d < draft_vocab; ++d) targets[d] = static_cast<int32_t>(d);
    return targets;
  }
  absl::StatusOr<TensorView> view = store.Get("d2t");
  if (!view.ok()) return view.status();
  const TensorView& d2t = *view;
  if (d2t.integer != IntegerType::kI64 || d2t.shape != std::vector<int64_t>{draft_vocab}) {
    return Eagle3Refusal(absl::StrCat("weight \"d2t\" is ", IntegerTypeName(d2t.integer), " ",
                                      ShapeString(d2t.shape), ", expected I64 [", draft_vocab,
                                      "]"));
  }
  for (int64_t d = 0; d < draft_vocab; ++d) {
    int64_t offset;
    std::memcpy(&offset, static_cast<const char*>(d2t.data) + d * sizeof(offset), sizeof(offset));
    const int64_t target = d + offset;
    if (target < 0 || target >= vocab) {
      return Eagle3Refusal(absl::StrCat("d2t maps draft id ", d, " to ", target,
                                        ", outside the target's vocabulary of ", vocab));
    }
    targets[d] = static_cast<int32_t>(target);
  }
  return targets;
}

}  // namespace pagoda
