#include "common/lora_adapter.h"

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/safetensors_writer.h"

namespace pagoda {
namespace {

using Json = nlohmann::json;
using ::pagoda::testing::BF16Bytes;
using ::pagoda::testing::F16Bytes;
using ::pagoda::testing::F32Bytes;
using ::pagoda::testing::MakeTempDir;
using ::pagoda::testing::NamedTensor;
using ::pagoda::testing::WriteFile;
using ::pagoda::testing::WriteSafetensors;
using ::testing::HasSubstr;

ModelConfig TinyBase() {
  ModelConfig base;
  base.hidden_size = 12;
  base.intermediate_size = 20;
  base.num_hidden_layers = 2;
  base.num_attention_heads = 4;
  base.num_key_value_heads = 2;
  base.head_dim = 3;
  return base;
}

Json PeftConfig(int rank, Json targets) {
  // What PEFT 0.1x writes (LoraConfig.to_dict), the keys that matter and a
  // few that must be ignored.
  return Json{{"peft_type", "LORA"},
              {"task_type", "CAUSAL_LM"},
              {"r", rank},
              {"lora_alpha", 16},
              {"lora_dropout", 0.05},
              {"bias", "none"},
              {"use_rslora", false},
              {"use_dora", false},
              {"fan_in_fan_out", false},
              {"modules_to_save", nullptr},
              {"rank_pattern", Json::object()},
              {"alpha_pattern", Json::object()},
              {"init_lora_weights", true},
              {"base_model_name_or_path", "some/model"},
              {"target_modules", targets},
              {"layers_to_transform", nullptr}};
}

std::vector<float> Values(size_t count, int seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> values(count);
  for (float& v : values) v = dist(rng);
  return values;
}

class LoraAdapterTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeTempDir("lora_adapter"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // All targets of all layers, with A [rank, in] and B [out, rank].
  std::vector<NamedTensor> Tensors(int rank, const std::vector<LoraModule>& modules,
                                   DType dtype = DType::kF32) {
    std::vector<NamedTensor> tensors;
    int seed = 0;
    for (int layer = 0; layer < base_.num_hidden_layers; ++layer) {
      for (LoraModule module : modules) {
        const LinearShape shape = LoraModuleShape(base_, module);
        const std::string prefix = PeftLoraTensorPrefix(layer, module);
        tensors.push_back(Tensor(prefix + "_A.weight", {rank, shape.in}, dtype, ++seed));
        tensors.push_back(Tensor(prefix + "_B.weight", {shape.out, rank}, dtype, ++seed));
      }
    }
    return tensors;
  }
  NamedTensor Tensor(const std::string& name, std::vector<int64_t> shape, DType dtype, int seed) {
    const std::vector<float> values = Values(shape[0] * shape[1], seed);
    std::string raw = dtype == DType::kF32   ? F32Bytes(values)
                      : dtype == DType::kF16 ? F16Bytes(values)
                                             : BF16Bytes(values);
    return NamedTensor{name, dtype, shape, raw};
  }
  void Write(const Json& config, const std::vector<NamedTensor>& tensors) {
    ASSERT_TRUE(WriteFile(dir_ + "/adapter_config.json", config.dump()).ok());
    ASSERT_TRUE(WriteSafetensors(dir_ + "/adapter_model.safetensors", tensors).ok());
  }
  std::string LoadError(int max_rank = 16, int max_trainable_tokens = 0) {
    auto adapter = LoadLoraAdapter(dir_, base_, max_rank, max_trainable_tokens);
    EXPECT_FALSE(adapter.ok());
    return std::string(adapter.status().message());
  }

  ModelConfig base_ = TinyBase();
  std::string dir_;
};

TEST_F(LoraAdapterTest, LoadsEveryModuleInEachDtype) {
  const std::vector<LoraModule> all(kAllLoraModules.begin(), kAllLoraModules.end());
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    Write(PeftConfig(4,
                     {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}),
          Tensors(4, all, dtype));
    auto adapter = LoadLoraAdapter(dir_, base_, 8);
    ASSERT_TRUE(adapter.ok()) << adapter.status();
    EXPECT_FLOAT_EQ(adapter->scale, 16.0f / 4);
    const auto& down = adapter->layers[1][static_cast<int>(LoraModule::kDown)];
    ASSERT_TRUE(down.has_value());
    EXPECT_EQ(down->in, 20);
    EXPECT_EQ(down->out, 12);
    EXPECT_EQ(down->a.size(), 4u * 20);
    // The first A element of layer 1's down_proj (the 27th tensor drawn), as written.
    const float written = Values(4 * 20, 27)[0];
    EXPECT_NEAR(down->a[0], written, 1e-2);
  }
}

TEST_F(LoraAdapterTest, RsLoraScalesBySquareRoot) {
  Json config = PeftConfig(4, {"q_proj"});
  config["use_rslora"] = true;
  Write(config, Tensors(4, {LoraModule::kQ}));
  auto adapter = LoadLoraAdapter(dir_, base_, 8);
  ASSERT_TRUE(adapter.ok()) << adapter.status();
  EXPECT_FLOAT_EQ(adapter->scale, 16.0f / 2);
  EXPECT_FALSE(adapter->layers[0][static_cast<int>(LoraModule::kK)].has_value());
}

TEST_F(LoraAdapterTest, StringTargetsLetTheTensorsDecide) {
  Write(PeftConfig(2, ".*\\.(q_proj|v_proj)"), Tensors(2, {LoraModule::kQ, LoraModule::kV}));
  auto adapter = LoadLoraAdapter(dir_, base_, 8);
  ASSERT_TRUE(adapter.ok()) << adapter.status();
  EXPECT_TRUE(adapter->layers[1][static_cast<int>(LoraModule::kV)].has_value());
  EXPECT_FALSE(adapter->layers[1][static_cast<int>(LoraModule::kK)].has_value());
}

TEST_F(LoraAdapterTest, LayersToTransformLimitsTheLayers) {
  Json config = PeftConfig(2, {"q_proj"});
  config["layers_to_transform"] = {1};
  std::vector<NamedTensor> tensors = Tensors(2, {LoraModule::kQ});
  tensors.erase(tensors.begin(), tensors.begin() + 2);  // Layer 0's pair.
  Write(config, tensors);
  auto adapter = LoadLoraAdapter(dir_, base_, 8);
  ASSERT_TRUE(adapter.ok()) << adapter.status();
  EXPECT_FALSE(adapter->layers[0][0].has_value());
  EXPECT_TRUE(adapter->layers[1][0].has_value());
  config["layers_to_transform"] = {1, 2};
  Write(config, tensors);
  EXPECT_THAT(LoadError(), HasSubstr("layers_to_transform names layer 2; the base model has 2"));
}

TEST_F(LoraAdapterTest, RefusesRankAboveMax) {
  Write(PeftConfig(8, {"q_proj"}), Tensors(8, {LoraModule::kQ}));
  EXPECT_THAT(LoadError(4), HasSubstr("LoRA rank 8 is outside [1, 4] (--max-lora-rank)"));
}

TEST_F(LoraAdapterTest, RefusesUnknownTargetModule) {
  Write(PeftConfig(2, {"q_proj", "rotary_emb"}), Tensors(2, {LoraModule::kQ}));
  EXPECT_THAT(LoadError(), HasSubstr("target module \"rotary_emb\" is not one of q/k/v/o/gate/"
                                     "up/down_proj, embed_tokens or lm_head"));
}

TEST_F(LoraAdapterTest, RefusesWhatVllmRefuses) {
  const std::vector<std::pair<std::string, Json>> cases = {{"use_dora", true},
                                                           {"bias", "all"},
                                                           {"modules_to_save", {"lm_head"}},
                                                           {"fan_in_fan_out", true},
                                                           {"rank_pattern", {{"q_proj", 4}}},
                                                           {"peft_type", "IA3"}};
  for (const auto& [key, value] : cases) {
    Json config = PeftConfig(2, {"q_proj"});
    config[key] = value;
    Write(config, Tensors(2, {LoraModule::kQ}));
    EXPECT_THAT(LoadError(), HasSubstr(key)) << key;
  }
}

TEST_F(LoraAdapterTest, RefusesWrongShapes) {
  std::vector<NamedTensor> tensors = Tensors(2, {LoraModule::kK});
  tensors[1] = Tensor(tensors[1].name, {7, 2}, DType::kF32, 1);  // B out 7, expected 6.
  Write(PeftConfig(2, {"k_proj"}), tensors);
  const std::string error = LoadError();
  EXPECT_THAT(error, HasSubstr("k_proj.lora_B.weight"));
  EXPECT_THAT(error, HasSubstr("[7, 2], expected [6, 2]"));
  // A rank in the tensors other than the config's r.
  Write(PeftConfig(2, {"k_proj"}), Tensors(3, {LoraModule::kK}));
  EXPECT_THAT(LoadError(), HasSubstr("expected [2, 12]"));
}

TEST_F(LoraAdapterTest, RefusesMissingAndExtraTensors) {
  std::vector<NamedTensor> tensors = Tensors(2, {LoraModule::kQ, LoraModule::kV});
  Write(PeftConfig(2, {"q_proj"}), tensors);
  EXPECT_THAT(LoadError(), HasSubstr("unexpected tensor \"base_model.model.model.layers.0."
                                     "self_attn.v_proj.lora_A.weight\""));
  tensors.pop_back();  // Layer 1's v_proj B.
  Write(PeftConfig(2, {"q_proj", "v_proj"}), tensors);
  EXPECT_THAT(LoadError(), HasSubstr("missing tensor \"base_model.model.model.layers.1.self_attn."
                                     "v_proj.lora_B.weight\""));
  tensors = Tensors(2, {LoraModule::kQ});
  tensors.push_back(Tensor("base_model.model.model.layers.2.self_attn.q_proj.lora_A.weight",
                           {2, 12}, DType::kF32, 9));
  Write(PeftConfig(2, {"q_proj"}), tensors);
  EXPECT_THAT(LoadError(), HasSubstr("unexpected tensor"));
  tensors = Tensors(2, {LoraModule::kQ});
  tensors.push_back(Tensor("base_model.model.lm_head.weight", {2, 12}, DType::kF32, 9));
  Write(PeftConfig(2, {"q_proj"}), tensors);
  EXPECT_THAT(LoadError(), HasSubstr("unexpected tensor \"base_model.model.lm_head.weight\""));
}

// embed_tokens and lm_head, as vLLM's Llama takes them (its
// embedding_modules): PEFT's lora_embedding_A [r, vocab] and
// lora_embedding_B [hidden, r], and the head's lora_A [r, hidden] and
// lora_B [vocab, r]; listed, or found by a string target_modules.
TEST_F(LoraAdapterTest, LoadsEmbedTokensAndLmHeadUpdates) {
  base_.vocab_size = 40;
  const std::vector<NamedTensor> vocabulary = {
      Tensor("base_model.model.model.embed_tokens.lora_embedding_A", {2, 40}, DType::kBF16, 5),
      Tensor("base_model.model.model.embed_tokens.lora_embedding_B", {12, 2}, DType::kBF16, 6),
      Tensor("base_model.model.lm_head.lora_A.weight", {2, 12}, DType::kF16, 7),
      Tensor("base_model.model.lm_head.lora_B.weight", {40, 2}, DType::kF32, 8)};
  for (const Json& targets : {Json{"q_proj", "embed_tokens", "lm_head"}, Json("all-linear")}) {
    std::vector<NamedTensor> tensors = Tensors(2, {LoraModule::kQ});
    tensors.insert(tensors.end(), vocabulary.begin(), vocabulary.end());
    Write(PeftConfig(2, targets), tensors);
    auto adapter = LoadLoraAdapter(dir_, base_, 8);
    ASSERT_TRUE(adapter.ok()) << adapter.status();
    ASSERT_TRUE(adapter->embed_tokens.has_value());
    ASSERT_TRUE(adapter->lm_head.has_value());
    EXPECT_EQ(std::tie(adapter->embed_tokens->in, adapter->embed_tokens->out),
              std::tuple(int64_t{40}, int64_t{12}));
    EXPECT_EQ(std::tie(adapter->lm_head->in, adapter->lm_head->out),
              std::tuple(int64_t{12}, int64_t{40}));
    EXPECT_EQ(adapter->lm_head->b, Values(40 * 2, 8));
    EXPECT_EQ(adapter->bytes(), (2 * (2 * 12 + 12 * 2) + 2 * 40 + 12 * 2 + 2 * 12 + 40 * 2) * 4u);
  }
  // Only the head: no layer is touched.
  Write(PeftConfig(2, {"lm_head"}), {vocabulary[2], vocabulary[3]});
  auto head_only = LoadLoraAdapter(dir_, base_, 8);
  ASSERT_TRUE(head_only.ok()) << head_only.status();
  EXPECT_FALSE(head_only->embed_tokens.has_value());
  EXPECT_FALSE(head_only->layers[0][0].has_value());
}

// The vocabulary is the base model's (vLLM: "The embedding LoRA size ...
// must be consistent with the base model's vocabulary size"); a target's
// tensors are needed only where it is listed; a retrained head or
// embedding (modules_to_save) is refused; and old
// vLLM's extra-vocabulary file is not read, as current vLLM's LoRAModel
// reads only adapter_model.*.
TEST_F(LoraAdapterTest, AdaptersLeaveTheVocabularyAlone) {
  base_.vocab_size = 40;
  std::vector<NamedTensor> tensors = Tensors(2, {LoraModule::kQ});
  tensors.push_back(
      Tensor("base_model.model.model.embed_tokens.lora_embedding_A", {2, 48}, DType::kF32, 5));
  tensors.push_back(
      Tensor("base_model.model.model.embed_tokens.lora_embedding_B", {12, 2}, DType::kF32, 6));
  Write(PeftConfig(2, {"q_proj", "embed_tokens"}), tensors);
  EXPECT_THAT(LoadError(), HasSubstr("[2, 48], expected [2, 40]"));
  Write(PeftConfig(2, {"q_proj", "lm_head"}), Tensors(2, {LoraModule::kQ}));
  EXPECT_THAT(LoadError(), HasSubstr("missing tensor \"base_model.model.lm_head.lora_A.weight\""));
  tensors = Tensors(2, {LoraModule::kQ});
  tensors.push_back(Tensor("base_model.model.lm_head.lora_A.weight", {2, 12}, DType::kF32, 9));
  Write(PeftConfig(2, {"q_proj"}), tensors);
  EXPECT_THAT(LoadError(),
              HasSubstr("unexpected tensor \"base_model.model.lm_head.lora_A.weight\""));
  Json retrained = PeftConfig(2, {"q_proj"});
  retrained["modules_to_save"] = {"embed_tokens"};
  Write(retrained, Tensors(2, {LoraModule::kQ}));
  EXPECT_THAT(LoadError(), HasSubstr("modules_to_save"));
  Write(PeftConfig(2, {"q_proj"}), Tensors(2, {LoraModule::kQ}));
  auto plain = LoadLoraAdapter(dir_, base_, 8);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(WriteSafetensors(dir_ + "/new_embeddings.safetensors",
                               {Tensor("input_embeddings", {8, 12}, DType::kF32, 3),
                                Tensor("output_embeddings", {8, 12}, DType::kF32, 4)})
                  .ok());
  auto with_extra = LoadLoraAdapter(dir_, base_, 8);
  ASSERT_TRUE(with_extra.ok()) << with_extra.status();
  EXPECT_EQ(with_extra->layers[1][0]->a, plain->layers[1][0]->a);
  EXPECT_EQ(with_extra->layers[1][0]->b, plain->layers[1][0]->b);
  EXPECT_FALSE(with_extra->embed_tokens.has_value());
}

// PEFT's trainable_token_indices: a list names embed_tokens' tokens, a map
// names modules by their name's end; each module's rows are
// ...token_adapter.trainable_tokens_delta [n, hidden] in the list's order.
TEST_F(LoraAdapterTest, LoadsTrainableTokensRows) {
  base_.vocab_size = 40;
  const NamedTensor embed_rows = Tensor(kPeftEmbedTokenRows, {3, 12}, DType::kF32, 11);
  const NamedTensor head_rows = Tensor(kPeftLmHeadTokenRows, {2, 12}, DType::kF16, 12);
  std::vector<NamedTensor> tensors = Tensors(2, {LoraModule::kQ});
  tensors.push_back(embed_rows);
  Json config = PeftConfig(2, {"q_proj"});
  config["trainable_token_indices"] = {39, 0, 7};
  Write(config, tensors);
  auto listed = LoadLoraAdapter(dir_, base_, 8, 3);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_TRUE(listed->embed_token_rows.has_value());
  EXPECT_EQ(listed->embed_token_rows->ids, (std::vector<int32_t>{39, 0, 7}));
  EXPECT_EQ(listed->embed_token_rows->rows, Values(3 * 12, 11));
  EXPECT_FALSE(listed->lm_head_token_rows.has_value());

  tensors.push_back(head_rows);
  config["trainable_token_indices"] = {{"model.embed_tokens", {39, 0, 7}}, {"lm_head", {5, 6}}};
  Write(config, tensors);
  auto mapped = LoadLoraAdapter(dir_, base_, 8, 3);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  ASSERT_TRUE(mapped->lm_head_token_rows.has_value());
  EXPECT_EQ(mapped->lm_head_token_rows->ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(mapped->bytes(), (2 * (2 * 12 + 12 * 2) + 5 * 12 + 5) * 4u);

  // A tied base's head is its embedding: the head takes the embedding's
  // rows, and rows of its own are refused.
  base_.tie_word_embeddings = true;
  EXPECT_THAT(LoadError(16, 3), HasSubstr("lm_head's trainable tokens are embed_tokens'"));
  tensors.pop_back();
  config["trainable_token_indices"] = {{"embed_tokens", {39, 0, 7}}};
  Write(config, tensors);
  auto tied = LoadLoraAdapter(dir_, base_, 8, 3);
  ASSERT_TRUE(tied.ok()) << tied.status();
  ASSERT_TRUE(tied->lm_head_token_rows.has_value());
  EXPECT_EQ(tied->lm_head_token_rows->rows, tied->embed_token_rows->rows);
}

// vLLM's checks of trainable_token_indices, its limit, and ours: the ids
// inside the base vocabulary, the rows' shape, only embed_tokens/lm_head.
TEST_F(LoraAdapterTest, RefusesBadTrainableTokens) {
  base_.vocab_size = 40;
  std::vector<NamedTensor> tensors = Tensors(2, {LoraModule::kQ});
  tensors.push_back(Tensor(kPeftEmbedTokenRows, {2, 12}, DType::kF32, 11));
  const std::vector<std::pair<Json, std::string>> cases = {
      {Json::array(), "non-empty lists of unique non-negative"},
      {Json::object(), "at least one module"},
      {{3, 3}, "unique"},
      {{3, -1}, "non-negative"},
      {{3, 4.5}, "non-negative"},
      {{3, "4"}, "non-negative"},
      {{{"embed_tokens", {1, 2}}, {"model.layers.0.self_attn.q_proj", {1}}},
       "names module \"model.layers.0.self_attn.q_proj\""},
      {{{"embed_tokens", {1, 2}}, {"model.embed_tokens", {3}}}, "once each"},
      {{1, 2, 3, 4}, "adapter needs 4 trainable tokens per module, above "
                     "--max-lora-trainable-tokens 3"},
      {{1, 40}, "trainable token id 40 is outside the base model's 40-token vocabulary"},
      {{1, 2, 3}, "[2, 12], expected [3, 12]"},
  };
  for (const auto& [indices, error] : cases) {
    Json config = PeftConfig(2, {"q_proj"});
    config["trainable_token_indices"] = indices;
    Write(config, tensors);
    EXPECT_THAT(LoadError(16, 3), HasSubstr(error)) << indices.dump();
  }
  Json config = PeftConfig(2, {"q_proj"});
  config["trainable_token_indices"] = {1, 2};
  Write(config, tensors);
  EXPECT_THAT(LoadError(16, 0), HasSubstr("above --max-lora-trainable-tokens 0"));
  Write(config, Tensors(2, {LoraModule::kQ}));
  EXPECT_THAT(LoadError(16, 3), HasSubstr("missing tensor \"" + std::string(kPeftEmbedTokenRows)));
  Write(PeftConfig(2, {"q_proj"}), tensors);
  EXPECT_THAT(LoadError(16, 3),
              HasSubstr("unexpected tensor \"" + std::string(kPeftEmbedTokenRows)));
}

TEST_F(LoraAdapterTest, RefusesCorruptFiles) {
  Write(PeftConfig(2, {"q_proj"}), Tensors(2, {LoraModule::kQ}));
  ASSERT_TRUE(WriteFile(dir_ + "/adapter_model.safetensors", "\x10\0\0\0\0\0\0\0{\"a\":").ok());
  EXPECT_THAT(LoadError(), HasSubstr("adapter_model.safetensors"));
  ASSERT_TRUE(WriteFile(dir_ + "/adapter_config.json", "{\"r\": 2,").ok());
  EXPECT_THAT(LoadError(), HasSubstr("adapter_config.json: not a JSON object"));
  std::filesystem::remove(dir_ + "/adapter_config.json");
  EXPECT_THAT(LoadError(), HasSubstr("adapter_config.json: cannot read"));
  std::vector<NamedTensor> tensors = Tensors(2, {LoraModule::kQ});
  tensors[0].raw = F32Bytes(std::vector<float>(2 * 12, std::nanf("")));
  Write(PeftConfig(2, {"q_proj"}), tensors);
  EXPECT_THAT(LoadError(), HasSubstr("non-finite"));
}

}  // namespace
}  // namespace pagoda
