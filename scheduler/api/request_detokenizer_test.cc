#include "scheduler/api/request_detokenizer.h"

#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/support/tiny_tokenizer_suite.h"
#include "text/utf8.h"

namespace pagoda::scheduler {
namespace {

// The real tokenizer, counting the ids it is asked to decode: the work an
// incremental detokenizer does.
class CountingTokenizer : public Tokenizer {
 public:
  explicit CountingTokenizer(const Tokenizer* inner) : inner_(inner) {}
  absl::StatusOr<std::vector<int>> Encode(const std::string& text) const override {
    return inner_->Encode(text);
  }
  absl::StatusOr<std::string> Decode(const std::vector<int>& ids) const override {
    decoded_ids_ += ids.size();
    return inner_->Decode(ids);
  }
  int vocab_size() const override { return inner_->vocab_size(); }
  std::string kind() const override { return inner_->kind(); }
  size_t decoded_ids() const { return decoded_ids_; }

 private:
  const Tokenizer* inner_;
  mutable size_t decoded_ids_ = 0;
};

// A sentencepiece BPE of 512 pieces with byte fallback: characters outside
// its training text become one token per UTF-8 byte.
class RequestDetokenizerTest : public testing::TinyTokenizerSuite<512> {
 protected:
  // Streams `ids` in chunks of 1 to `max_chunk` tokens; checks that no
  // piece ends inside a character and that the pieces make the whole text.
  static void CheckStream(const std::vector<int>& ids, std::mt19937& rng, int max_chunk) {
    RequestDetokenizer detokenizer(tokenizer_);
    std::string streamed;
    for (size_t i = 0; i < ids.size();) {
      const size_t n = std::min<size_t>(ids.size() - i, 1 + rng() % max_chunk);
      const std::string piece =
          detokenizer.Append(std::vector<int32_t>(ids.begin() + i, ids.begin() + i + n));
      EXPECT_TRUE(IsValidUtf8(piece)) << "piece after token " << i + n;
      streamed += piece;
      i += n;
    }
    streamed += detokenizer.Flush();
    absl::StatusOr<std::string> whole = tokenizer_->Decode(ids);
    ASSERT_TRUE(whole.ok());
    EXPECT_EQ(streamed, *whole);
  }

};

TEST_F(RequestDetokenizerTest, MultiByteCharactersSplitAcrossTokens) {
  std::mt19937 rng(1);
  for (const char* text : {"naïve café", "日本語のテキスト and more", "emoji 🙂🚀 end",
                           "the quick brown fox", " leading and  double  spaces ",
                           "mixed ü漢🙂x"}) {
    absl::StatusOr<std::vector<int>> ids = tokenizer_->Encode(text);
    ASSERT_TRUE(ids.ok());
    // The byte-fallback pieces really split characters over tokens.
    if (std::string(text).find("🙂") != std::string::npos) {
      EXPECT_GT(ids->size(), 8u);
    }
    SCOPED_TRACE(text);
    CheckStream(*ids, rng, 1);
    CheckStream(*ids, rng, 3);
  }
}

TEST_F(RequestDetokenizerTest, RandomTokenStreamsEqualWholeDecoding) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int> ids(1 + rng() % 80);
    for (int& id : ids) {
      // Half byte-fallback pieces (ids 3..258), so characters are split,
      // completed, and left incomplete or invalid.
      id = rng() % 2 == 0 ? 3 + static_cast<int>(rng() % 256)
                          : static_cast<int>(rng() % tokenizer_->vocab_size());
    }
    SCOPED_TRACE(trial);
    CheckStream(ids, rng, 1 + trial % 4);
  }
}

TEST_F(RequestDetokenizerTest, RandomTextsEqualWholeDecoding) {
  std::mt19937 rng(11);
  const std::vector<std::string> parts = {"the ", "rain", " falls", "é", "ß", "中", "文",
                                          "🙂", "\n", "  ", "x", "Ω", "🚀", "ok."};
  for (int trial = 0; trial < 200; ++trial) {
    std::string text;
    for (int k = 1 + rng() % 30; k > 0; --k) text += parts[rng() % parts.size()];
    absl::StatusOr<std::vector<int>> ids = tokenizer_->Encode(text);
    ASSERT_TRUE(ids.ok());
    SCOPED_TRACE(text);
    CheckStream(*ids, rng, 1 + trial % 3);
  }
}

// Linear work: one token at a time, 8k tokens decode a few ids per token
// (the window) plus one whole decode at the end, not 8k * 8k / 2.
TEST_F(RequestDetokenizerTest, WorkIsLinearInOutputLength) {
  absl::StatusOr<std::vector<int>> sentence =
      tokenizer_->Encode("The river runs past the old mill, 日本語 🙂 and into the sea. ");
  ASSERT_TRUE(sentence.ok());
  std::vector<int> ids;
  while (ids.size() < 8192) ids.insert(ids.end(), sentence->begin(), sentence->end());
  ids.resize(8192);
  CountingTokenizer counting(tokenizer_);
  RequestDetokenizer detokenizer(&counting);
  std::string streamed;
  const absl::Time start = absl::Now();
  for (int id : ids) streamed += detokenizer.Append({id});
  streamed += detokenizer.Flush();
  const absl::Duration elapsed = absl::Now() - start;
  EXPECT_EQ(streamed, *tokenizer_->Decode(ids));
  EXPECT_LT(counting.decoded_ids(), 16 * ids.size());
  std::cout << "detokenized " << ids.size() << " tokens one at a time in " << elapsed << " ("
            << counting.decoded_ids() << " ids decoded)\n";
}

TEST_F(RequestDetokenizerTest, NoTokenizerMeansNoText) {
  RequestDetokenizer detokenizer(nullptr);
  EXPECT_EQ(detokenizer.Append({5, 6}), "");
  EXPECT_EQ(detokenizer.Flush(), "");
}

}  // namespace
}  // namespace pagoda::scheduler
