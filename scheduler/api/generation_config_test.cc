#include "scheduler/api/generation_config.h"

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "tests/support/tiny_model.h"

namespace pagoda::scheduler {
namespace {

class GenerationConfigTest : public ::testing::Test {
 protected:
  GenerationConfigTest() : dir_(pagoda::testing::TempPath("pagoda_generation_config")) {
    std::filesystem::create_directories(dir_);
  }
  ~GenerationConfigTest() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& text) {
    std::ofstream(dir_ + "/generation_config.json") << text;
  }
  std::string dir_;
};

TEST_F(GenerationConfigTest, AutoReadsTheSamplingFieldsTheFileSets) {
  Write(R"({"temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05,
            "eos_token_id": [1, 2], "min_p": null})");
  absl::StatusOr<SamplingDefaults> defaults = LoadSamplingDefaults("auto", dir_);
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->temperature, 0.7f);
  EXPECT_EQ(defaults->top_p, 0.8f);
  EXPECT_EQ(defaults->top_k, 20);
  EXPECT_EQ(defaults->repetition_penalty, 1.05f);
  EXPECT_FALSE(defaults->min_p.has_value());
  EXPECT_EQ(DescribeSamplingDefaults(*defaults),
            "temperature=0.7 top_k=20 top_p=0.8 repetition_penalty=1.05");
  // vllm ignores the file; a directory must hold one.
  EXPECT_FALSE(LoadSamplingDefaults("vllm", dir_)->temperature.has_value());
  EXPECT_EQ(LoadSamplingDefaults(dir_, "/nonexistent")->top_k, 20);
  EXPECT_FALSE(LoadSamplingDefaults("/nonexistent", dir_).ok());
}

TEST_F(GenerationConfigTest, NoFileMeansNoDefaultsAndBadFilesAreRefused) {
  absl::StatusOr<SamplingDefaults> none = LoadSamplingDefaults("auto", dir_);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(DescribeSamplingDefaults(*none), "none");
  Write("{not json");
  EXPECT_EQ(LoadSamplingDefaults("auto", dir_).status().code(),
            absl::StatusCode::kInvalidArgument);
  Write(R"({"top_k": 0.5})");
  EXPECT_FALSE(LoadSamplingDefaults("auto", dir_).ok());
  Write(R"({"temperature": "hot"})");
  EXPECT_FALSE(LoadSamplingDefaults("auto", dir_).ok());
  // Out of the ranges requests are held to: refused at start-up.
  for (const char* bad : {R"({"temperature": -1})", R"({"top_p": 1.5})", R"({"min_p": 2})",
                          R"({"top_k": 4294967296})", R"({"repetition_penalty": 50})"}) {
    Write(bad);
    EXPECT_EQ(LoadSamplingDefaults("auto", dir_).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  std::string oversized(2 << 20, ' ');  // Twice the 1 MiB limit.
  oversized.append("{}");
  Write(oversized);
  EXPECT_FALSE(LoadSamplingDefaults("auto", dir_).ok());
}

// vLLM's --override-generation-config: laid over the file's fields as
// vLLM's dict update (set replaces, null removes), alone under "vllm";
// other keys unread, bad values refused naming the flag.
TEST_F(GenerationConfigTest, TheOverrideIsLaidOverTheFilesFields) {
  Write(R"({"temperature": 0.7, "top_p": 0.8, "top_k": 20})");
  absl::StatusOr<SamplingDefaults> merged = LoadSamplingDefaults(
      "auto", dir_, R"({"temperature": 0.5, "top_k": null, "min_p": 0.1, "do_sample": true})");
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(DescribeSamplingDefaults(*merged), "temperature=0.5 top_p=0.8 min_p=0.1");
  absl::StatusOr<SamplingDefaults> alone =
      LoadSamplingDefaults("vllm", dir_, R"({"repetition_penalty": 1.1, "top_k": -1})");
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_EQ(DescribeSamplingDefaults(*alone), "top_k=0 repetition_penalty=1.1");
  EXPECT_EQ(LoadSamplingDefaults("auto", dir_, R"({"temperature": -1})").status().message(),
            "--override-generation-config: field \"temperature\" must be in [0, 1e+06], got -1");
  EXPECT_EQ(LoadSamplingDefaults("auto", dir_, "[1]").status().message(),
            "--override-generation-config: not a JSON object");
}

// max_new_tokens, as vLLM's get_diff_sampling_param and override_max_tokens:
// the default max_tokens wherever it comes from; a cap too when it comes
// from a --generation-config directory's file or from the override.
TEST_F(GenerationConfigTest, MaxNewTokensIsTheDefaultAndSometimesTheCap) {
  Write(R"({"max_new_tokens": 64, "max_length": 4096})");
  absl::StatusOr<SamplingDefaults> automatic = LoadSamplingDefaults("auto", dir_);
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ(automatic->max_tokens, 64);
  EXPECT_FALSE(automatic->max_tokens_cap.has_value());
  EXPECT_EQ(DescribeSamplingDefaults(*automatic), "max_tokens=64");
  absl::StatusOr<SamplingDefaults> directory = LoadSamplingDefaults(dir_, "/nonexistent");
  ASSERT_TRUE(directory.ok()) << directory.status();
  EXPECT_EQ(directory->max_tokens, 64);
  EXPECT_EQ(directory->max_tokens_cap, 64);
  EXPECT_EQ(DescribeSamplingDefaults(*directory), "max_tokens=64 max_tokens_cap=64");
  // The override's replaces the file's, and caps under every mode.
  for (const std::string mode : {std::string("auto"), std::string("vllm"), dir_}) {
    absl::StatusOr<SamplingDefaults> given =
        LoadSamplingDefaults(mode, dir_, R"({"max_new_tokens": 8})");
    ASSERT_TRUE(given.ok()) << given.status();
    EXPECT_EQ(given->max_tokens, 8) << mode;
    EXPECT_EQ(given->max_tokens_cap, 8) << mode;
  }
  // null removes it: no default, and under auto no cap either.
  absl::StatusOr<SamplingDefaults> removed =
      LoadSamplingDefaults("auto", dir_, R"({"max_new_tokens": null})");
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(DescribeSamplingDefaults(*removed), "none");
  // An override without it leaves the file's default, still no cap.
  EXPECT_FALSE(LoadSamplingDefaults("auto", dir_, R"({"top_k": 3})")->max_tokens_cap.has_value());
  for (const char* bad :
       {R"({"max_new_tokens": 0})", R"({"max_new_tokens": -4})", R"({"max_new_tokens": 1.5})",
        R"({"max_new_tokens": "64"})", R"({"max_new_tokens": 4294967296})"}) {
    Write(bad);
    EXPECT_EQ(LoadSamplingDefaults("auto", dir_).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
    EXPECT_FALSE(CheckSamplingOverride(bad).ok()) << bad;
  }
  EXPECT_EQ(CheckSamplingOverride(R"({"max_new_tokens": 0})").message(),
            "--override-generation-config: field \"max_new_tokens\" must be in [1, 2147483647], "
            "got 0");
}

}  // namespace
}  // namespace pagoda::scheduler
