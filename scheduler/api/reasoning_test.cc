#include "scheduler/api/reasoning.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pagoda::scheduler {
namespace {

// A vocabulary of a few named tokens: id i is words[i] (nullopt: special).
class WordTokenizer : public Tokenizer {
 public:
  explicit WordTokenizer(std::vector<std::optional<std::string>> words)
      : words_(std::move(words)) {}
  absl::StatusOr<std::vector<int>> Encode(const std::string&) const override {
    return std::vector<int>();
  }
  absl::StatusOr<std::string> Decode(const std::vector<int>&) const override { return ""; }
  int vocab_size() const override { return static_cast<int>(words_.size()); }
  std::string kind() const override { return "words"; }
  absl::StatusOr<std::vector<std::optional<std::string>>> TokenBytes() const override {
    return words_;
  }

 private:
  std::vector<std::optional<std::string>> words_;
};

ReasoningMarkers Markers() {
  return {.start = "<think>", .end = "</think>", .start_id = 7, .end_id = 8};
}

TEST(ReasoningTest, ParserNames) {
  EXPECT_TRUE(CheckReasoningParserName("").ok());
  EXPECT_TRUE(CheckReasoningParserName("deepseek_r1").ok());
  const absl::Status qwen = CheckReasoningParserName("qwen3");
  EXPECT_EQ(qwen.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(qwen.message(),
            "--reasoning-parser qwen3: must be deepseek_r1 (the one this server has)");
}

TEST(ReasoningTest, FindsTheMarkersInTheVocabulary) {
  const WordTokenizer tokenizer({"a", "<think>", std::nullopt, "</think>", "<think>"});
  absl::StatusOr<std::optional<ReasoningMarkers>> found =
      FindReasoningMarkers("deepseek_r1", &tokenizer);
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->start_id, 4);  // The last: added tokens come last.
  EXPECT_EQ((*found)->end_id, 3);

  EXPECT_FALSE(FindReasoningMarkers("", &tokenizer)->has_value());
  const WordTokenizer no_end({"a", "<think>", std::nullopt});
  const absl::Status missing = FindReasoningMarkers("deepseek_r1", &no_end).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(missing.message(),
            "--reasoning-parser deepseek_r1: the tokenizer has no </think> token (a non-special "
            "token whose text is </think>): not a reasoning model");
  EXPECT_EQ(FindReasoningMarkers("deepseek_r1", nullptr).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ReasoningTest, SplitsAFinishedOutputAsVllm) {
  const ReasoningMarkers markers = Markers();
  struct Case {
    std::string text;
    std::optional<std::string> reasoning, content;
  };
  for (const Case& c :
       std::vector<Case>{{"I think.</think>The answer.", "I think.", "The answer."},
                         {"<think>I think.</think>The answer.", "I think.", "The answer."},
                         {"I think and am cut short", "I think and am cut short", std::nullopt},
                         {"I think.</think>", "I think.", std::nullopt},
                         {"", "", std::nullopt},
                         {"lost<think>kept</think>answer", "kept", "answer"},
                         {"a</think>b</think>c", "a", "b</think>c"},
                         {"<think>a<think>b</think>c", "a<think>b", "c"}}) {
    const ReasoningSplit split = SplitReasoning(markers, c.text);
    EXPECT_EQ(split.reasoning, c.reasoning) << c.text;
    EXPECT_EQ(split.content, c.content) << c.text;
  }
}

// Streams `text` in pieces cut at `cuts`; returns (reasoning, content).
std::pair<std::string, std::string> Stream(const ReasoningMarkers& markers, const std::string& text,
                                           std::vector<size_t> cuts) {
  ReasoningStream stream(&markers);
  std::string reasoning, content;
  size_t from = 0;
  cuts.push_back(text.size());
  for (size_t cut : cuts) {
    const ReasoningStream::Pieces pieces = stream.Feed(text.substr(from, cut - from));
    // Content only ever follows the reasoning.
    if (!content.empty()) EXPECT_TRUE(pieces.reasoning.empty()) << text;
    reasoning += pieces.reasoning;
    content += pieces.content;
    from = cut;
  }
  const ReasoningStream::Pieces rest = stream.Finish();
  return {reasoning + rest.reasoning, content + rest.content};
}

TEST(ReasoningTest, AStreamCutAnywhereSaysWhatTheWholeOutputSays) {
  const ReasoningMarkers markers = Markers();
  std::mt19937 rng(11);
  for (const std::string text :
       {"I think.</think>The answer.", "<think>I think.</think>The answer.", "cut short",
        "<think>cut</thi", "a</think>b</think>c", "<think>a<think>b</think>c",
        "<think><</</think><", "</think>", "x</think"}) {
    const ReasoningSplit whole = SplitReasoning(markers, text);
    const std::pair<std::string, std::string> expected = {whole.reasoning.value_or(""),
                                                          whole.content.value_or("")};
    std::vector<size_t> every(text.size() > 0 ? text.size() - 1 : 0);
    for (size_t i = 0; i < every.size(); ++i) every[i] = i + 1;
    EXPECT_EQ(Stream(markers, text, {}), expected) << text;
    EXPECT_EQ(Stream(markers, text, every), expected) << text << " byte by byte";
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<size_t> cuts;
      for (size_t i = 1; i < text.size(); ++i) {
        if (rng() % 3 == 0) cuts.push_back(i);
      }
      EXPECT_EQ(Stream(markers, text, cuts), expected) << text;
    }
  }
}

TEST(ReasoningTest, AStreamHoldsBackOnlyWhatMayBeAMarker) {
  const ReasoningMarkers markers = Markers();
  ReasoningStream stream(&markers);
  EXPECT_EQ(stream.Feed("I think </th").reasoning, "I think ");
  const ReasoningStream::Pieces split = stream.Feed("ink>The");
  EXPECT_EQ(split.reasoning, "");
  EXPECT_EQ(split.content, "The");
  EXPECT_EQ(stream.Feed(" <think>").content, " <think>");  // Content is verbatim.
  // Text before a start marker streams as reasoning (vLLM's stream does the same).
  ReasoningStream early(&markers);
  EXPECT_EQ(early.Feed("lost").reasoning, "lost");
  EXPECT_EQ(early.Feed("<think>kept").reasoning, "kept");
}

TEST(ReasoningTest, CountsTheThinkingTokens) {
  const ReasoningMarkers markers = Markers();
  ReasoningTokenCounter counter;
  counter.Add(markers, {7, 1, 2});
  EXPECT_EQ(counter.count(), 2);
  counter.Add(markers, {3, 8, 4, 5});
  EXPECT_EQ(counter.count(), 3);
  counter.Add(markers, {6});
  EXPECT_EQ(counter.count(), 3);
  ReasoningTokenCounter cut_short;
  cut_short.Add(markers, {1, 2, 3});
  EXPECT_EQ(cut_short.count(), 3);
}

}  // namespace
}  // namespace pagoda::scheduler
