// vLLM's runtime LoRA routes over the registry (LoraAdapters): `model`
// resolved to an adapter, the /v1/models cards, and every refusal of
// /v1/load_lora_adapter and /v1/unload_lora_adapter with the HTTP status
// the route answers (docs/lora.md), on adapters written to disk.
#include "scheduler/api/lora_adapters.h"

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "common/lora_adapter.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/api/openai_protocol.h"
#include "tests/support/safetensors_writer.h"

namespace pagoda::scheduler {
namespace {

using nlohmann::json;
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

class LoraAdaptersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("lora_adapters");
    lora_dir_ = root_ + "/adapters";
    std::filesystem::create_directories(lora_dir_);
    adapters_ = std::make_unique<LoraAdapters>(Options(lora_dir_));
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  LoraAdaptersOptions Options(const std::string& lora_dir) {
    LoraAdaptersOptions options;
    options.registry = &registry_;
    options.lora_dir = lora_dir;
    options.max_lora_rank = 8;
    options.base = TinyBase();
    options.base_model_name = "tiny";
    options.forget = [this](int id) { forgotten_.push_back(id); };
    return options;
  }

  // A PEFT adapter of `rank` on q_proj and down_proj in `dir`; `in_delta`
  // widens A's input past the base model's.
  void WriteAdapter(const std::string& dir, int rank,
                    std::vector<std::string> targets = {"q_proj", "down_proj"}, int in_delta = 0) {
    std::filesystem::create_directories(dir);
    std::vector<NamedTensor> tensors;
    std::mt19937 rng(rank);
    std::uniform_real_distribution<float> dist(-1, 1);
    for (int layer = 0; layer < 2; ++layer) {
      for (const std::string& name : targets) {
        const LoraModule module = *FindLoraModule(name);
        const LinearShape shape = LoraModuleShape(TinyBase(), module);
        const std::string prefix = PeftLoraTensorPrefix(layer, module);
        std::vector<float> a(rank * (shape.in + in_delta)), b(shape.out * rank);
        for (float& v : a) v = dist(rng);
        for (float& v : b) v = dist(rng);
        tensors.push_back(
            {prefix + "_A.weight", DType::kF32, {rank, shape.in + in_delta}, F32Bytes(a)});
        tensors.push_back({prefix + "_B.weight", DType::kF32, {shape.out, rank}, F32Bytes(b)});
      }
    }
    const json config = {{"peft_type", "LORA"},       {"r", rank},      {"lora_alpha", 16},
                         {"target_modules", targets}, {"bias", "none"}, {"use_rslora", false}};
    ASSERT_TRUE(WriteFile(dir + "/adapter_config.json", config.dump()).ok());
    ASSERT_TRUE(WriteSafetensors(dir + "/adapter_model.safetensors", tensors).ok());
  }

  // The route's answer to a load of `body`: 200 or the refusal's status.
  int LoadStatus(const json& body, std::string* message = nullptr) {
    absl::StatusOr<std::string> answer = adapters_->Load(body);
    if (message != nullptr)
      *message = answer.ok() ? *answer : std::string(answer.status().message());
    return answer.ok() ? 200 : LoraRouteHttpStatus(answer.status());
  }
  int UnloadStatus(const json& body, std::string* message = nullptr) {
    absl::StatusOr<std::string> answer = adapters_->Unload(body);
    if (message != nullptr)
      *message = answer.ok() ? *answer : std::string(answer.status().message());
    return answer.ok() ? 200 : LoraRouteHttpStatus(answer.status());
  }

  std::string root_, lora_dir_;
  lora::LoraRegistry registry_;
  std::vector<int> forgotten_;
  std::unique_ptr<LoraAdapters> adapters_;
};

TEST_F(LoraAdaptersTest, ModelNamesTheBaseModelOrAServedAdapter) {
  ASSERT_TRUE(registry_.Add({"sql", "/adapters/sql", ""}).ok());
  EXPECT_EQ(*adapters_->AdapterFor(""), "");
  EXPECT_EQ(*adapters_->AdapterFor("tiny"), "");
  EXPECT_EQ(*adapters_->AdapterFor("sql"), "sql");
  const absl::Status unknown = adapters_->AdapterFor("chat").status();
  EXPECT_EQ(HttpStatusOf(unknown), 404);
  EXPECT_THAT(unknown.message(), HasSubstr("model: `chat` does not exist"));
  // The error names its field, as vLLM's _check_model does (param "model").
  EXPECT_EQ(MakeOpenAiError(unknown)["error"]["param"], "model");
}

// vLLM's --served-model-name A B: every name is the base model's, and no
// adapter may take one.
TEST_F(LoraAdaptersTest, EveryServedNameIsTheBaseModels) {
  LoraAdaptersOptions options = Options(lora_dir_);
  options.base_model_aliases = {"tiny-alias"};
  LoraAdapters adapters(std::move(options));
  EXPECT_EQ(*adapters.AdapterFor("tiny-alias"), "");
  EXPECT_EQ(*adapters.AdapterFor("tiny"), "");
  EXPECT_EQ(HttpStatusOf(adapters.AdapterFor("tiny-other").status()), 404);
  WriteAdapter(lora_dir_ + "/good", 4);
  absl::StatusOr<std::string> loaded =
      adapters.Load({{"lora_name", "tiny-alias"}, {"lora_path", "good"}});
  EXPECT_EQ(loaded.status().message(), "lora_name: 'tiny-alias' is the base model's name");
}

TEST_F(LoraAdaptersTest, LoadsAnAdapterUnderTheLoraDirAndListsIt) {
  WriteAdapter(lora_dir_ + "/sql", 4);
  std::string message;
  ASSERT_EQ(LoadStatus({{"lora_name", "sql"}, {"lora_path", lora_dir_ + "/sql"}}, &message), 200)
      << message;
  EXPECT_EQ(message, "Success: LoRA adapter 'sql' added successfully.");
  WriteAdapter(lora_dir_ + "/chat", 8);
  ASSERT_EQ(LoadStatus({{"lora_name", "chat"}, {"lora_path", "chat"}}, &message), 200) << message;
  EXPECT_EQ(*adapters_->AdapterFor("chat"), "chat");
  const std::vector<json> cards = adapters_->ModelCards(7);
  ASSERT_EQ(cards.size(), 2u);
  EXPECT_EQ(cards[0]["id"], "sql");
  EXPECT_EQ(cards[0]["parent"], "tiny");
  EXPECT_EQ(cards[0]["root"], std::filesystem::canonical(lora_dir_ + "/sql").string());
  EXPECT_EQ(cards[1]["root"], std::filesystem::canonical(lora_dir_ + "/chat").string());
  EXPECT_EQ((*adapters_->ModelCard("chat", 7))["id"], "chat");
  EXPECT_EQ(adapters_->ModelCard("nope", 7).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(LoraAdaptersTest, RefusesEachBadLoadWithItsStatusAndLine) {
  WriteAdapter(lora_dir_ + "/good", 4);
  WriteAdapter(lora_dir_ + "/rank16", 16);
  WriteAdapter(lora_dir_ + "/wide", 4, {"q_proj"}, /*in_delta=*/1);
  WriteAdapter(root_ + "/outside", 4);
  std::filesystem::create_directories(lora_dir_ + "/unknown_target");
  ASSERT_TRUE(
      WriteFile(lora_dir_ + "/unknown_target/adapter_config.json",
                json({{"r", 4}, {"lora_alpha", 8}, {"target_modules", {"rotary_emb"}}}).dump())
          .ok());
  WriteAdapter(lora_dir_ + "/corrupt", 4);
  ASSERT_TRUE(WriteFile(lora_dir_ + "/corrupt/adapter_model.safetensors", "\x10\x00garbage").ok());
  ASSERT_EQ(LoadStatus({{"lora_name", "good"}, {"lora_path", "good"}}), 200);

  struct Case {
    const char* what;
    json body;
    int status;
    const char* says;
  } cases[] = {
      {"not an object", json::array({1}), 400, "body: must be a JSON object"},
      {"no path", {{"lora_name", "x"}}, 400, "Both 'lora_name' and 'lora_path' must be provided."},
      {"no name", {{"lora_path", "good"}}, 400, "must be provided"},
      {"name not a string",
       {{"lora_name", 5}, {"lora_path", "good"}},
       400,
       "lora_name: must be a string"},
      {"name with a space", {{"lora_name", "a b"}, {"lora_path", "good"}}, 400, "lora_name: "},
      {"name too long",
       {{"lora_name", std::string(257, 'a')}, {"lora_path", "good"}},
       400,
       "1 to 256 bytes"},
      {"path too long",
       {{"lora_name", "x"}, {"lora_path", std::string(5000, 'a')}},
       400,
       "lora_path: at most 4096 bytes"},
      {"load_inplace",
       {{"lora_name", "x"}, {"lora_path", "good"}, {"load_inplace", true}},
       400,
       "load_inplace"},
      {"the base model's name",
       {{"lora_name", "tiny"}, {"lora_path", "good"}},
       400,
       "lora_name: 'tiny' is the base model's name"},
      {"duplicate",
       {{"lora_name", "good"}, {"lora_path", "good"}},
       400,
       "The lora adapter 'good' has already been loaded."},
      {"outside", {{"lora_name", "x"}, {"lora_path", root_ + "/outside"}}, 403, "lora_path: "},
      {"dot dot", {{"lora_name", "x"}, {"lora_path", "../outside"}}, 403, "lora_path: "},
      {"missing inside", {{"lora_name", "x"}, {"lora_path", "absent"}}, 404, "lora_path: "},
      {"rank over the max", {{"lora_name", "x"}, {"lora_path", "rank16"}}, 400, "16"},
      {"unknown target", {{"lora_name", "x"}, {"lora_path", "unknown_target"}}, 400, "rotary_emb"},
      {"shape", {{"lora_name", "x"}, {"lora_path", "wide"}}, 400, "shape"},
      {"corrupt", {{"lora_name", "x"}, {"lora_path", "corrupt"}}, 400, "adapter_model.safetensors"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::string message;
    EXPECT_EQ(LoadStatus(c.body, &message), c.status) << message;
    EXPECT_THAT(message, HasSubstr(c.says));
    EXPECT_FALSE(adapters_->AdapterFor("x").ok());  // Nothing registered.
  }
  EXPECT_EQ(registry_.List().size(), 1u);
  // Without --lora-dir no runtime load reads anything.
  LoraAdapters closed(Options(""));
  EXPECT_EQ(LoraRouteHttpStatus(
                closed.Load({{"lora_name", "y"}, {"lora_path", lora_dir_ + "/good"}}).status()),
            403);
}

TEST_F(LoraAdaptersTest, UnloadRefusesUnknownAndInUseAdaptersThenForgetsIt) {
  WriteAdapter(lora_dir_ + "/sql", 4);
  ASSERT_EQ(LoadStatus({{"lora_name", "sql"}, {"lora_path", "sql"}}), 200);
  std::string message;
  EXPECT_EQ(UnloadStatus(json::object(), &message), 400);
  EXPECT_EQ(message, "'lora_name' needs to be provided to unload a LoRA adapter.");
  EXPECT_EQ(UnloadStatus({{"lora_name", std::string(300, 'n')}}), 400);
  EXPECT_EQ(UnloadStatus({{"lora_name", "chat"}}, &message), 404);
  EXPECT_EQ(message, "The lora adapter 'chat' cannot be found.");
  const int id = *registry_.Acquire("sql");  // A request uses it.
  EXPECT_EQ(UnloadStatus({{"lora_name", "sql"}}, &message), 409);
  EXPECT_THAT(message, HasSubstr("in use by 1 request"));
  EXPECT_TRUE(forgotten_.empty());
  registry_.Release(id);
  EXPECT_EQ(UnloadStatus({{"lora_name", "sql"}}, &message), 200);
  EXPECT_EQ(message, "Success: LoRA adapter 'sql' removed successfully.");
  EXPECT_EQ(forgotten_, std::vector<int>({id}));
  EXPECT_EQ(HttpStatusOf(adapters_->AdapterFor("sql").status()), 404);
  EXPECT_EQ(UnloadStatus({{"lora_name", "sql"}}), 404);
}

}  // namespace
}  // namespace pagoda::scheduler
