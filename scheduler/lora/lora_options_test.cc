#include "scheduler/lora/lora_options.h"

#include "gtest/gtest.h"

namespace pagoda::lora {
namespace {

TEST(LoraOptionsTest, ParsesBothFormsOfLoraModules) {
  auto specs = ParseLoraModules(
      {"sql=/adapters/sql", R"({"name": "chat", "path": "/a/chat", "base_model_name": "base"})",
       R"({"name":"x=y","path":"/p"})", "eq=/a=b"});
  ASSERT_FALSE(specs.ok());  // "x=y" is not a valid name.
  specs = ParseLoraModules({"sql=/adapters/sql",
                            R"({"name": "chat", "path": "/a/chat", "base_model_name": "base"})",
                            "eq=/a=b"});
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 3u);
  EXPECT_EQ((*specs)[0], (LoraModuleSpec{"sql", "/adapters/sql", ""}));
  EXPECT_EQ((*specs)[1], (LoraModuleSpec{"chat", "/a/chat", "base"}));
  EXPECT_EQ((*specs)[2], (LoraModuleSpec{"eq", "/a=b", ""}));  // Split at the first '='.
}

TEST(LoraOptionsTest, RefusesMalformedValuesNamingThem) {
  for (const char* bad : {"noequals", "=path", "name=", "bad name=/p", "{\"name\":\"a\"}",
                          "{\"name\":\"a\",\"path\":3}",
                          "{\"name\":\"a\",\"path\":\"/p\",\"x\":\"\"}", "{not json"}) {
    auto spec = ParseLoraModule(bad);
    ASSERT_FALSE(spec.ok()) << bad;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(spec.status().message().find("--lora-modules"), std::string::npos) << bad;
  }
}

TEST(LoraOptionsTest, SplitsOneFlagStringOutsideJsonObjects) {
  EXPECT_EQ(SplitLoraModulesFlag("a=/x b=/y,c=/z  "),
            (std::vector<std::string>{"a=/x", "b=/y", "c=/z"}));
  const std::string json = R"({"name": "sql", "path": "/a, b/{c}", "base_model_name": "m\"}"})";
  EXPECT_EQ(SplitLoraModulesFlag(json + ", d=/w"), (std::vector<std::string>{json, "d=/w"}));
  auto specs = ParseLoraModules(SplitLoraModulesFlag(json + " d=/w"));
  ASSERT_TRUE(specs.ok()) << specs.status();
  EXPECT_EQ((*specs)[0].path, "/a, b/{c}");
  EXPECT_TRUE(SplitLoraModulesFlag(" , ").empty());
  // An unclosed object stays one value, which the parser refuses.
  EXPECT_EQ(SplitLoraModulesFlag(R"({"name": "a" x=/y)").size(), 1u);
}

TEST(LoraOptionsTest, RefusesDuplicateNames) {
  auto specs = ParseLoraModules({"a=/x", R"({"name":"a","path":"/y"})"});
  ASSERT_FALSE(specs.ok());
  EXPECT_EQ(specs.status().message(), "--lora-modules names \"a\" twice");
}

TEST(LoraOptionsTest, ValidatesAcrossFlags) {
  LoraOptions options;
  options.modules = {{"a", "/x", ""}};
  EXPECT_FALSE(ValidateLoraOptions(options).ok());  // No --enable-lora.
  options.enable_lora = true;
  options.max_loras = 4;
  ASSERT_TRUE(ValidateLoraOptions(options).ok());
  EXPECT_EQ(options.max_cpu_loras, 4);
  options.max_cpu_loras = 2;
  EXPECT_EQ(ValidateLoraOptions(options).message(),
            "--max-cpu-loras 2 is below --max-loras: expected 0 (= --max-loras) or at least 4");
  options.max_cpu_loras = 8;
  options.max_lora_rank = 513;
  EXPECT_EQ(ValidateLoraOptions(options).message(),
            "--max-lora-rank 513 is out of range: expected 1 to 512");
  options.max_lora_rank = 64;
  options.max_lora_trainable_tokens = 16385;
  EXPECT_EQ(ValidateLoraOptions(options).message(),
            "--max-lora-trainable-tokens 16385 is out of range: expected 0 to 16384");
  options.max_lora_trainable_tokens = 16384;
  ASSERT_TRUE(ValidateLoraOptions(options).ok());
  options.max_loras = 0;
  EXPECT_EQ(ValidateLoraOptions(options).message(),
            "--max-loras 0 is out of range: expected 1 to 1024");
}

}  // namespace
}  // namespace pagoda::lora
