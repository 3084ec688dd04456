// Unit checks of HfTokenizer on small hand-written files; the real Llama 2/3
// and Qwen files are checked against Hugging Face's JS port in
// tests/tokenizer/conformance_test.mjs.
#include "text/hf_tokenizer.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace pagoda {
namespace {

// Byte-level BPE over "a", "b", "c", "Ġ" (the byte-level space) and merges
// that build "ab", "abc" and "Ġa".
constexpr char kByteLevelJson[] = R"({
  "added_tokens": [{"id": 9, "content": "<|end|>", "special": true}],
  "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "dropout": null, "unk_token": null,
            "vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3, "ab": 4, "abc": 5, "Ġa": 6, "Ġab": 7},
            "merges": ["a b", "ab c", "Ġ a", "Ġa b"]}
})";

std::string WithPart(const std::string& key, const std::string& value) {
  std::string json = kByteLevelJson;
  const std::string needle = "\"" + key + "\": ";
  const size_t start = json.find(needle) + needle.size();
  const size_t end = key == "normalizer" ? json.find(",\n", start) : json.find("},\n", start) + 1;
  return json.replace(start, end - start, value);
}

TEST(HfTokenizerTest, MergesByRankAndMatchesAddedTokensFirst) {
  auto tokenizer = HfTokenizer::FromJson(kByteLevelJson);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  // " ab" is Ġ + ab, not Ġab: "a b" (rank 0) merges before "Ġ a" (rank 2).
  EXPECT_EQ(*(*tokenizer)->Encode("abc ab<|end|>"), (std::vector<int>{5, 3, 4, 9}));
  EXPECT_EQ(*(*tokenizer)->Encode(" a"), (std::vector<int>{6}));
  EXPECT_EQ(*(*tokenizer)->Decode({5, 7, 9}), "abc ab<|end|>");
  EXPECT_EQ((*tokenizer)->vocab_size(), 10);
}

TEST(HfTokenizerTest, RefusesInvalidUtf8AndUnknownIds) {
  auto tokenizer = HfTokenizer::FromJson(kByteLevelJson);
  ASSERT_TRUE(tokenizer.ok());
  EXPECT_EQ((*tokenizer)->Encode("a\xFF").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*tokenizer)->Decode({10}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*tokenizer)->Decode({-1}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(HfTokenizerTest, RefusesPartsOutsideTheSupportedSubset) {
  EXPECT_FALSE(HfTokenizer::FromJson("not json").ok());
  EXPECT_FALSE(HfTokenizer::FromJson("[]").ok());
  auto unigram = HfTokenizer::FromJson(R"({"model": {"type": "Unigram", "vocab": []}})");
  ASSERT_FALSE(unigram.ok());
  EXPECT_NE(unigram.status().message().find("BPE"), std::string::npos);
  auto normalizer = HfTokenizer::FromJson(WithPart("normalizer", R"({"type": "Lowercase"})"));
  ASSERT_FALSE(normalizer.ok());
  EXPECT_NE(normalizer.status().message().find("Lowercase"), std::string::npos)
      << normalizer.status();
  auto decoder = HfTokenizer::FromJson(WithPart("decoder", R"({"type": "WordPiece"})"));
  ASSERT_FALSE(decoder.ok());
  EXPECT_NE(decoder.status().message().find("WordPiece"), std::string::npos) << decoder.status();
  auto bad_merge = std::string(kByteLevelJson);
  bad_merge.replace(bad_merge.find("\"a b\""), 5, "\"a z\"");
  EXPECT_FALSE(HfTokenizer::FromJson(bad_merge).ok());
}

// Found by tests/fuzz/tokenizer_json_fuzzer.cc: a value of the wrong type
// where the format has a string, a bool or an object made nlohmann throw out
// of FromJson and ended the process.
TEST(HfTokenizerTest, ValuesOfTheWrongTypeAreRefusedNotThrown) {
  for (const auto& [part, value] : std::vector<std::pair<std::string, std::string>>{
           {"post_processor", R"({"type": 206})"},
           {"post_processor", R"({"type": "TemplateProcessing", "single": [{"SpecialToken": 3}]})"},
           {"post_processor", R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": 1}}]})"},
           {"normalizer", R"({"type": ["Prepend"]})"},
           {"decoder", R"({"type": 1})"},
           // Counts that are not non-negative ints (a float out of int's
           // range was undefined behaviour in the conversion).
           {"decoder", R"({"type": "Strip", "content": " ", "start": 8.9e113, "stop": 0})"},
           {"decoder", R"({"type": "Strip", "content": " ", "start": 1, "stop": -1})"},
           {"decoder", R"({"type": "Strip", "content": " ", "start": "1"})"},
           {"pre_tokenizer", R"({"type": "ByteLevel", "add_prefix_space": "yes"})"}}) {
    std::string json = kByteLevelJson;
    json.insert(json.size() - 1, ", \"" + part + "\": " + value);
    if (part != "post_processor") json = WithPart(part, value);
    absl::StatusOr<std::unique_ptr<HfTokenizer>> tokenizer = HfTokenizer::FromJson(json);
    EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument) << part << value;
  }
  auto added = std::string(kByteLevelJson);
  added.replace(added.find("\"special\": true"), 15, "\"special\": \"yes\"");
  EXPECT_EQ(HfTokenizer::FromJson(added).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(HfTokenizerTest, ByteFallbackSpellsUnknownCharactersAsBytes) {
  constexpr char kJson[] = R"({
    "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "pre_tokenizer": null,
    "decoder": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "byte_fallback": true, "fuse_unk": true,
              "vocab": {"<unk>": 0, "<0xC3>": 1, "<0xA9>": 2, "▁": 3, "h": 4, "i": 5, "▁h": 6, "▁hi": 7},
              "merges": ["▁ h", "▁h i"]}
  })";
  auto tokenizer = HfTokenizer::FromJson(kJson);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  // "é" is not in the vocabulary: its two bytes are.
  EXPECT_EQ(*(*tokenizer)->Encode("hi é"), (std::vector<int>{7, 3, 1, 2}));
  EXPECT_EQ(*(*tokenizer)->Decode({7, 3, 1, 2}), "hi é");
  // A lone lead byte decodes to U+FFFD.
  EXPECT_EQ(*(*tokenizer)->Decode({7, 1}), "hi\xEF\xBF\xBD");
}

}  // namespace
}  // namespace pagoda
