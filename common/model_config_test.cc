#include "common/model_config.h"

#include <filesystem>
#include <string>

#include "common/sampling_limits.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/safetensors_writer.h"

namespace pagoda {
namespace {

using Json = nlohmann::json;
using ::pagoda::testing::MakeTempDir;
using ::pagoda::testing::WriteFile;

Json TinyLlama() {
  return Json{{"architectures", {"LlamaForCausalLM"}},
              {"vocab_size", 320},
              {"hidden_size", 64},
              {"intermediate_size", 160},
              {"num_hidden_layers", 2},
              {"num_attention_heads", 8},
              {"num_key_value_heads", 2},
              {"max_position_embeddings", 512},
              {"rms_norm_eps", 1e-5},
              {"rope_theta", 500000.0},
              {"rope_scaling", nullptr},
              {"tie_word_embeddings", true},
              {"torch_dtype", "bfloat16"},
              {"bos_token_id", 1},
              {"eos_token_id", 2}};
}

class ModelConfigTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeTempDir("pagoda_model_config_"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  absl::StatusOr<ModelConfig> Load(const Json& config) {
    EXPECT_TRUE(WriteFile(dir_ + "/config.json", config.dump()).ok());
    return LoadModelConfig(dir_);
  }

  // Loading `config` fails, naming config.json and `field` in one line.
  void ExpectError(const Json& config, const std::string& field) {
    auto loaded = Load(config);
    ASSERT_FALSE(loaded.ok()) << "expected an error about " << field;
    const std::string message(loaded.status().message());
    EXPECT_NE(message.find("config.json"), std::string::npos) << message;
    EXPECT_NE(message.find("\"" + field + "\""), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }

  std::string dir_;
};

TEST_F(ModelConfigTest, ReadsLlamaConfig) {
  auto config = Load(TinyLlama());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, "LlamaForCausalLM");
  EXPECT_EQ(config->vocab_size, 320);
  EXPECT_EQ(config->hidden_size, 64);
  EXPECT_EQ(config->intermediate_size, 160);
  EXPECT_EQ(config->num_hidden_layers, 2);
  EXPECT_EQ(config->num_attention_heads, 8);
  EXPECT_EQ(config->num_key_value_heads, 2);
  EXPECT_EQ(config->head_dim, 8);
  EXPECT_EQ(config->max_position_embeddings, 512);
  EXPECT_DOUBLE_EQ(config->rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(config->rope_theta, 500000.0);
  EXPECT_EQ(config->rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_TRUE(config->tie_word_embeddings);
  EXPECT_FALSE(config->attention_bias);
  EXPECT_EQ(config->torch_dtype, "bfloat16");
  EXPECT_EQ(config->bos_token_id, 1);
  EXPECT_EQ(config->eos_token_ids, std::vector<int>({2}));
}

TEST_F(ModelConfigTest, DefaultsWhenOptionalFieldsAreAbsent) {
  Json json = TinyLlama();
  for (const char* field : {"num_key_value_heads", "rms_norm_eps", "rope_theta", "rope_scaling",
                            "tie_word_embeddings", "torch_dtype", "bos_token_id", "eos_token_id"}) {
    json.erase(field);
  }
  auto config = Load(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->num_key_value_heads, 8);
  EXPECT_DOUBLE_EQ(config->rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(config->rope_theta, 10000.0);
  EXPECT_FALSE(config->tie_word_embeddings);
  EXPECT_EQ(config->bos_token_id, -1);
  EXPECT_TRUE(config->eos_token_ids.empty());
}

TEST_F(ModelConfigTest, ExplicitHeadDimWins) {
  Json json = TinyLlama();
  json["head_dim"] = 16;
  auto config = Load(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->head_dim, 16);
}

TEST_F(ModelConfigTest, Qwen2AlwaysHasAttentionBias) {
  Json json = TinyLlama();
  json["architectures"] = {"Qwen2ForCausalLM"};
  json["attention_bias"] = false;
  json["eos_token_id"] = {5, 7};
  auto config = Load(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(config->attention_bias);
  EXPECT_EQ(config->eos_token_ids, std::vector<int>({5, 7}));
}

TEST_F(ModelConfigTest, LlamaAttentionBiasIsRead) {
  Json json = TinyLlama();
  json["attention_bias"] = true;
  auto config = Load(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->attention_bias);
}

TEST_F(ModelConfigTest, LinearRopeScaling) {
  Json json = TinyLlama();
  json["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  auto config = Load(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_DOUBLE_EQ(config->rope_scaling.factor, 4.0);
}

TEST_F(ModelConfigTest, Llama3RopeScaling) {
  Json json = TinyLlama();
  json["rope_scaling"] = {{"rope_type", "llama3"},
                          {"factor", 8.0},
                          {"low_freq_factor", 2.0},
                          {"high_freq_factor", 6.0},
                          {"original_max_position_embeddings", 128}};
  auto config = Load(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_DOUBLE_EQ(config->rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(config->rope_scaling.low_freq_factor, 2.0);
  EXPECT_DOUBLE_EQ(config->rope_scaling.high_freq_factor, 6.0);
  EXPECT_EQ(config->rope_scaling.original_max_position_embeddings, 128);
}

TEST_F(ModelConfigTest, UnsupportedRopeScalingIsNamed) {
  Json json = TinyLlama();
  json["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  auto config = Load(json);
  ASSERT_FALSE(config.ok());
  const std::string message(config.status().message());
  EXPECT_NE(message.find("yarn"), std::string::npos) << message;
  EXPECT_NE(message.find("rope_scaling"), std::string::npos) << message;
}

TEST_F(ModelConfigTest, MistralWithoutEffectiveSlidingWindowIsLlama) {
  Json json = TinyLlama();
  json["architectures"] = {"MistralForCausalLM"};
  json["sliding_window"] = nullptr;
  auto config = Load(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, "LlamaForCausalLM");
  json["sliding_window"] = 512;
  config = Load(json);
  ASSERT_TRUE(config.ok()) << config.status();
  json["sliding_window"] = 256;
  ExpectError(json, "sliding_window");
}

TEST_F(ModelConfigTest, OptionsTheModelCannotHonourAreRefused) {
  Json json = TinyLlama();
  json["hidden_act"] = "silu";
  json["mlp_bias"] = false;
  ASSERT_TRUE(Load(json).ok());
  json["hidden_act"] = "gelu";
  ExpectError(json, "hidden_act");
  json = TinyLlama();
  json["mlp_bias"] = true;
  ExpectError(json, "mlp_bias");
  json = TinyLlama();
  json["architectures"] = {"Qwen2ForCausalLM"};
  json["use_sliding_window"] = false;
  json["sliding_window"] = 256;  // Ignored by Qwen2 unless use_sliding_window is set.
  ASSERT_TRUE(Load(json).ok());
  json["use_sliding_window"] = true;
  ExpectError(json, "use_sliding_window");
}

TEST_F(ModelConfigTest, GenerationConfigEosWins) {
  Json json = TinyLlama();
  ASSERT_TRUE(
      WriteFile(dir_ + "/generation_config.json", Json{{"eos_token_id", {2, 9, 11}}}.dump()).ok());
  auto config = Load(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->eos_token_ids, std::vector<int>({2, 9, 11}));

  // A generation config without eos_token_id leaves config.json's.
  ASSERT_TRUE(WriteFile(dir_ + "/generation_config.json", Json{{"temperature", 0.6}}.dump()).ok());
  config = Load(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->eos_token_ids, std::vector<int>({2}));

  ASSERT_TRUE(WriteFile(dir_ + "/generation_config.json", "{not json").ok());
  config = Load(json);
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("generation_config.json"), std::string::npos);

  ASSERT_TRUE(WriteFile(dir_ + "/generation_config.json", Json{{"eos_token_id", "x"}}.dump()).ok());
  config = Load(json);
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("generation_config.json: field \"eos_token_id\""),
            std::string::npos)
      << config.status();
}

TEST_F(ModelConfigTest, BadFieldsNameTheField) {
  for (const char* field : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads", "max_position_embeddings"}) {
    SCOPED_TRACE(field);
    Json json = TinyLlama();
    json.erase(field);
    ExpectError(json, field);
    json[field] = 0;
    ExpectError(json, field);
    json[field] = -3;
    ExpectError(json, field);
    json[field] = "64";
    ExpectError(json, field);
    json[field] = 2.5;
    ExpectError(json, field);
  }
  Json json = TinyLlama();
  json["vocab_size"] = kMaxSamplingVocab + 1;  // Top-p's 64-bit mass sum could wrap.
  ExpectError(json, "vocab_size");
  json = TinyLlama();
  json["num_key_value_heads"] = 3;  // 8 % 3 != 0.
  ExpectError(json, "num_key_value_heads");
  json = TinyLlama();
  json["num_key_value_heads"] = 0;
  ExpectError(json, "num_key_value_heads");
  json = TinyLlama();
  json["num_attention_heads"] = 6;  // 64 % 6 != 0 and no head_dim.
  json["num_key_value_heads"] = 2;
  ExpectError(json, "hidden_size");
  json = TinyLlama();
  json["head_dim"] = -1;
  ExpectError(json, "head_dim");
  json = TinyLlama();
  json["head_dim"] = 7;
  ExpectError(json, "head_dim");
  json = TinyLlama();
  json["rms_norm_eps"] = -1.0;
  ExpectError(json, "rms_norm_eps");
  json = TinyLlama();
  json["rope_theta"] = "big";
  ExpectError(json, "rope_theta");
  json = TinyLlama();
  json["tie_word_embeddings"] = 1;
  ExpectError(json, "tie_word_embeddings");
  json = TinyLlama();
  json["eos_token_id"] = {2, -1};
  ExpectError(json, "eos_token_id");
  json = TinyLlama();
  json["eos_token_id"] = 320;  // Outside the vocabulary.
  ExpectError(json, "eos_token_id");
  json = TinyLlama();
  json["bos_token_id"] = 1000;
  ExpectError(json, "bos_token_id");
  json = TinyLlama();
  json["architectures"] = {"GPT2LMHeadModel"};
  ExpectError(json, "architectures");
  json = TinyLlama();
  json.erase("architectures");
  ExpectError(json, "architectures");
  json = TinyLlama();
  json["rope_scaling"] = {{"rope_type", "linear"}};
  ExpectError(json, "factor");
  json = TinyLlama();
  json["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 0}};
  ExpectError(json, "factor");
  json = TinyLlama();
  json["rope_scaling"] = {{"factor", 2.0}};
  ExpectError(json, "rope_scaling");
  json = TinyLlama();
  json["rope_scaling"] = "linear";
  ExpectError(json, "rope_scaling");
  json = TinyLlama();
  json["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", -1}};
  ExpectError(json, "low_freq_factor");
}

TEST_F(ModelConfigTest, MissingDirectoryFileAndBadJson) {
  auto missing_dir = LoadModelConfig(dir_ + "/nowhere");
  ASSERT_FALSE(missing_dir.ok());
  EXPECT_EQ(missing_dir.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing_dir.status().message().find("nowhere"), std::string::npos);

  auto missing_file = LoadModelConfig(dir_);
  ASSERT_FALSE(missing_file.ok());
  EXPECT_EQ(missing_file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing_file.status().message().find("config.json"), std::string::npos);

  for (const char* text : {"{\"vocab_size\": 3", "", "[1, 2]", "nul"}) {
    SCOPED_TRACE(text);
    ASSERT_TRUE(WriteFile(dir_ + "/config.json", text).ok());
    auto bad = LoadModelConfig(dir_);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find("config.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace pagoda
