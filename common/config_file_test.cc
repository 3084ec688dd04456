#include "common/config_file.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/yaml_json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

// enable_prefix_caching, a bool flag, is defined in flags_test.cc.

namespace pagoda {
namespace {

using ::testing::ElementsAre;

std::vector<std::string> ConfigWords(const std::string& yaml) {
  absl::StatusOr<nlohmann::ordered_json> parsed = ParseYamlDocument(yaml);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<std::vector<std::string>> words = ConfigFileWords(*parsed, "c.yaml");
  EXPECT_TRUE(words.ok()) << words.status();
  return words.value_or(std::vector<std::string>{"refused"});
}

std::string ConfigRefusal(const std::string& yaml) {
  absl::StatusOr<std::vector<std::string>> words =
      ConfigFileWords(*ParseYamlDocument(yaml), "c.yaml");
  EXPECT_FALSE(words.ok());
  return std::string(words.status().message());
}

// vLLM's load_config_file, key by key, in the file's order.
TEST(ConfigFileWordsTest, EachKeyBecomesTheWordsVllmWouldPass) {
  EXPECT_THAT(ConfigWords("port: 8000\ngpu-memory-utilization: 0.9\nmodel: /m\n"),
              ElementsAre("--port", "8000", "--gpu-memory-utilization", "0.9", "--model", "/m"));
  // true: the flag alone; false: off for a bool flag, else nothing.
  EXPECT_THAT(
      ConfigWords("enable-lora: true\nenable_prefix_caching: false\nenforce-eager: false\n"),
      ElementsAre("--enable-lora", "--enable_prefix_caching=false"));
  // A list: one word per item (none when empty); a mapping: its JSON.
  EXPECT_THAT(ConfigWords("lora-modules: [a=/x, b=/y]\nserved-model-name: []\n"
                          "speculative-config:\n  method: ngram\n  num_speculative_tokens: 4\n"),
              ElementsAre("--lora-modules", "a=/x", "b=/y", "--speculative-config",
                          R"({"method":"ngram","num_speculative_tokens":4})"));
  // Python's str() of the typed value: 0x10 is 16, 1.0 stays 1.0, a
  // quoted number stays as written, a bool in a list is True.
  EXPECT_THAT(ConfigWords("a: 0x10\nb: 1.0\nc: '007'\nd: [yes, 1_0]\n"),
              ElementsAre("--a", "16", "--b", "1.0", "--c", "007", "--d", "True", "10"));
}

TEST(ConfigFileWordsTest, RefusesNullsAnotherConfigAndNonMappings) {
  EXPECT_EQ(ConfigRefusal("max-model-len:\n"),
            "--config c.yaml: key \"max-model-len\": null: give a value or leave it out");
  EXPECT_EQ(ConfigRefusal("a: [1, null]\n"),
            "--config c.yaml: key \"a\": null: give a value or leave it out");
  EXPECT_EQ(ConfigRefusal("config: other.yaml\n"),
            "--config c.yaml: a config file cannot name another (key \"config\")");
  for (const char* not_a_mapping : {"", "[--port, 8000]\n", "port\n"}) {
    EXPECT_EQ(ConfigRefusal(not_a_mapping),
              "--config c.yaml: must hold a mapping of flag names to values (\"port: 8000\")")
        << not_a_mapping;
  }
}

class PullConfigFileTest : public ::testing::Test {
 protected:
  PullConfigFileTest()
      : dir_(std::filesystem::temp_directory_path() /
             absl::StrCat("pagoda_config_file_", getpid())) {
    std::filesystem::create_directories(dir_);
  }
  ~PullConfigFileTest() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  std::filesystem::path dir_;
};

// The file's words come first (after a leading model argument), so the
// command line's own flags, parsed later, win; the flag keeps the path.
TEST_F(PullConfigFileTest, SplicesTheFilesWordsBeforeTheCommandLines) {
  const std::string path = Write("c.yaml", "port: 1\nlora-modules: [a=/x]\n");
  EXPECT_THAT(*PullConfigFileArguments({"server", "--config", path, "--port", "2"}),
              ElementsAre("server", "--port", "1", "--lora-modules", "a=/x",
                          absl::StrCat("--config=", path), "--port", "2"));
  // vLLM's `serve MODEL --config FILE`: after the model, which a list flag
  // would otherwise take as one of its words.
  EXPECT_THAT(*PullConfigFileArguments({"server", "/model", absl::StrCat("--config=", path)}),
              ElementsAre("server", "/model", "--port", "1", "--lora-modules", "a=/x",
                          absl::StrCat("--config=", path)));
  // A leading model argument wins over the file's "model", as vLLM's.
  const std::string with_model = Write("m.yaml", "model: /file-model\nport: 3\n");
  EXPECT_THAT(
      *PullConfigFileArguments({"server", "/cli-model", "--config", with_model}),
      ElementsAre("server", "/cli-model", "--port", "3", absl::StrCat("--config=", with_model)));
  EXPECT_THAT(*PullConfigFileArguments({"server", "--config", with_model}),
              ElementsAre("server", "--model", "/file-model", "--port", "3",
                          absl::StrCat("--config=", with_model)));
  // None: unchanged; after "--": not ours.
  EXPECT_THAT(*PullConfigFileArguments({"server", "--port", "2", "--", "--config", path}),
              ElementsAre("server", "--port", "2", "--", "--config", path));
}

TEST_F(PullConfigFileTest, RefusesInOneLineNamingTheFile) {
  const std::string good = Write("c.yml", "port: 1\n");
  const auto refusal = [](std::vector<std::string> args) {
    absl::StatusOr<std::vector<std::string>> pulled = PullConfigFileArguments(std::move(args));
    EXPECT_FALSE(pulled.ok());
    return std::string(pulled.status().message());
  };
  EXPECT_EQ(refusal({"server", "--config", good, "--config", good}),
            "--config given more than once, as vLLM refuses");
  EXPECT_EQ(refusal({"server", "--config"}), "--config needs a file");
  // Abseil's one-dash spelling is read too, never left unread.
  EXPECT_EQ(refusal({"server", "-config", good, "-config=" + good}),
            "--config given more than once, as vLLM refuses");
  const std::string json = Write("c.json", "{}");
  EXPECT_EQ(refusal({"server", "--config", json}),
            absl::StrCat("--config ", json, ": must be a .yaml or .yml file, as vLLM's"));
  const std::string missing = (dir_ / "missing.yaml").string();
  EXPECT_EQ(refusal({"server", "--config", missing}),
            absl::StrCat("--config ", missing, ": cannot be read: No such file or directory"));
  const std::string broken = Write("broken.yaml", "port: [1\n");
  EXPECT_EQ(refusal({"server", "--config", broken}),
            absl::StrCat("--config ", broken, ": line 2: did not find expected ',' or ']'"));
  const std::string huge = Write("huge.yaml", std::string(kMaxConfigFileBytes + 1, '#'));
  EXPECT_EQ(refusal({"server", "--config", huge}),
            absl::StrCat("--config ", huge, ": is 1048577 bytes; at most 1048576"));
}

}  // namespace
}  // namespace pagoda
