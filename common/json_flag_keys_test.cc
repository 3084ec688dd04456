#include "common/json_flag_keys.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace pagoda {
namespace {

using Args = std::vector<std::string>;
const std::vector<std::string> kJsonFlags = {"speculative_config", "kv_events_config"};

absl::StatusOr<GatheredJsonFlags> Gather(Args args) {
  return GatherJsonFlagKeys(std::move(args), kJsonFlags);
}

// The JSON object of "--NAME=JSON" at args[index].
nlohmann::json ObjectAt(const GatheredJsonFlags& gathered, size_t index, const std::string& name) {
  const std::string& arg = gathered.args.at(index);
  const std::string prefix = "--" + name + "=";
  EXPECT_EQ(arg.rfind(prefix, 0), 0u) << arg;
  return nlohmann::json::parse(arg.substr(prefix.size()));
}

TEST(GatherJsonFlagKeysTest, KeysBecomeOneObjectWhereTheFirstStood) {
  // vLLM's spellings: dashes or underscores before the dot, "=" or the next
  // argument as the value, one dash or two.
  absl::StatusOr<GatheredJsonFlags> gathered =
      Gather({"prog", "--model", "/m", "--speculative-config.method", "ngram", "--port=0",
              "--speculative_config.num_speculative_tokens=4",
              "-speculative-config.prompt_lookup_max", "3"});
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  ASSERT_EQ(gathered->args.size(), 5u);
  EXPECT_EQ(gathered->args[1], "--model");
  EXPECT_EQ(gathered->args[2], "/m");
  EXPECT_EQ(gathered->args[4], "--port=0");
  EXPECT_EQ(ObjectAt(*gathered, 3, "speculative-config"),
            nlohmann::json::parse(
                R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3})"));
  EXPECT_TRUE(gathered->repeated_keys.empty());
}

TEST(GatherJsonFlagKeysTest, ValuesAreJsonThenHumanReadableIntegersThenText) {
  const std::pair<const char*, const char*> keys[] = {
      {"enable_kv_cache_events", "true"},
      {"hwm", "1k"},
      {"buffer_steps", "2K"},
      {"max_queue_size", "25.6k"},
      {"topic", "kv@pod@m"},
      {"replay_endpoint", "null"},
      {"endpoint", "tcp://*:5557"},
      {"a", "1.5K"},  // vLLM: no decimals with a binary suffix.
      {"d", "1.5e3k"},
      {"b", "[1, [2, 3]]"},
      {"c", "\"4\""}};
  Args args = {"prog"};
  for (const auto& [key, value] : keys) {
    args.push_back(std::string("--kv-events-config.") + key);
    args.push_back(value);
  }
  absl::StatusOr<GatheredJsonFlags> gathered = Gather(args);
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  ASSERT_EQ(gathered->args.size(), 2u);
  EXPECT_EQ(ObjectAt(*gathered, 1, "kv-events-config"), nlohmann::json::parse(R"({
      "enable_kv_cache_events": true, "hwm": 1000, "buffer_steps": 2048,
      "max_queue_size": 25600, "topic": "kv@pod@m", "replay_endpoint": null,
      "endpoint": "tcp://*:5557", "a": "1.5K", "d": "1.5e3k", "b": [1, [2, 3]], "c": "4"})"));
}

TEST(GatherJsonFlagKeysTest, NestedKeysMergeListsAppendAndARepeatedKeyIsReported) {
  absl::StatusOr<GatheredJsonFlags> gathered =
      Gather({"prog", "--speculative-config.a.b", "1", "--speculative-config.a.c", "2",
              "--speculative-config.list+", "x", "--speculative-config.list+=y,z",
              "--speculative-config.a.b", "5"});
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  EXPECT_EQ(ObjectAt(*gathered, 1, "speculative-config"),
            nlohmann::json::parse(R"({"a": {"b": 5, "c": 2}, "list": ["x", "y", "z"]})"));
  EXPECT_EQ(gathered->repeated_keys, (Args{"--speculative-config.a.b"}));
}

TEST(GatherJsonFlagKeysTest, LeavesOtherArgumentsAloneAndStopsAtTheTerminator) {
  const Args args = {"prog",    "--temperature", "-0.5", "--served-model-name=a.b",
                     "--model", "./x.y",         "--",   "--speculative-config.method",
                     "ngram"};
  absl::StatusOr<GatheredJsonFlags> gathered = Gather(args);
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  EXPECT_EQ(gathered->args, args);
  // The whole-JSON spelling alone is left for the flag to read.
  const Args whole = {"prog", "--speculative-config", R"({"method": "ngram"})"};
  gathered = Gather(whole);
  ASSERT_TRUE(gathered.ok());
  EXPECT_EQ(gathered->args, whole);
}

TEST(GatherJsonFlagKeysTest, RefusesWhatCannotBeGatheredNamingTheFlag) {
  EXPECT_EQ(Gather({"prog", "--max-num-seqs.x", "1"}).status().message(),
            "--max-num-seqs.x: --max-num-seqs takes no keys (only --speculative-config, "
            "--kv-events-config do)");
  EXPECT_EQ(GatherJsonFlagKeys({"prog", "--port.x", "1"}, {}).status().message(),
            "--port.x: --port takes no keys (no flag here does)");
  EXPECT_EQ(Gather({"prog", "--speculative-config.method"}).status().message(),
            "--speculative-config.method: no value after it");
  EXPECT_EQ(Gather({"prog", "--speculative-config.a..b", "1"}).status().message(),
            "--speculative-config.a..b: an empty key");
  EXPECT_EQ(Gather({"prog", "--speculative-config.", "1"}).status().message(),
            "--speculative-config.: an empty key");
  const std::string mixed =
      "--speculative-config given both as one JSON object and key by key "
      "(--speculative-config.KEY): give one form";
  EXPECT_EQ(Gather({"prog", "--speculative-config", "{}", "--speculative-config.method", "ngram"})
                .status()
                .message(),
            mixed);
  EXPECT_EQ(Gather({"prog", "--speculative_config.method=ngram", "--speculative_config={}"})
                .status()
                .message(),
            mixed);
}

}  // namespace
}  // namespace pagoda
