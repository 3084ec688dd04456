// Prints random texts that the constraint grammars allow, one JSON line
// each, for tests/constraints/grammar_suite_test.py to check with
// independent validators (python3-jsonschema, Python's re). Each text is a
// random walk over a small vocabulary (single bytes and a few multi-byte
// JSON pieces) drawn from the matcher's mask until the grammar may end and
// a coin says stop, or the step budget runs out ("complete": false).
//
//   sample_tool SUITE.json WALKS SEED
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "scheduler/constraints/compiled_grammar.h"
#include "scheduler/constraints/gbnf.h"
#include "scheduler/constraints/json_schema.h"
#include "scheduler/constraints/matcher.h"
#include "scheduler/constraints/regex.h"

namespace pagoda::constraints {
namespace {

std::shared_ptr<const TokenVocabulary> SmallVocabulary() {
  std::vector<std::optional<std::string>> tokens = {std::nullopt};  // 0: "EOS".
  for (int b = 1; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
  for (const char* piece : {"{\"", "\":", "\",", "\"}", "\"]", "},", "}]", "]}", "true", "false",
                            "null", ", \"", ": ", "\n  ", "12", "-1", "0.5", "\\u00e9", "\\n",
                            "\xC3\xA9", "\xE4\xB8\x80", "2024-", "T1", "[{", "[[", "]]", "}}"}) {
    tokens.push_back(std::string(piece));
  }
  const int size = static_cast<int>(tokens.size());
  return *TokenVocabulary::Create(std::move(tokens), size);
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Compile(
    const nlohmann::ordered_json& entry, const std::shared_ptr<const TokenVocabulary>& vocabulary) {
  GrammarBuilder g;
  if (entry.contains("grammar")) {
    absl::Status status = BuildGbnfGrammar(entry["grammar"].get<std::string>(), g);
    if (!status.ok()) return status;
  } else if (entry.contains("regex")) {
    const RuleId root = g.NewRule("root");
    absl::StatusOr<ExprId> expr = CompileRegex(entry["regex"].get<std::string>(), g);
    if (!expr.ok()) return expr.status();
    g.SetBody(root, *expr);
  } else {
    absl::Status status = BuildJsonSchemaGrammar(entry["schema"], JsonGrammarOptions{}, g);
    if (!status.ok()) return status;
  }
  return CompiledGrammar::Create(g, vocabulary);
}

// One random text; `complete` says whether the grammar ended it.
std::string Walk(Matcher matcher, std::mt19937_64& rng, bool* complete) {
  const TokenVocabulary& vocabulary = matcher.grammar().vocabulary();
  std::vector<uint32_t> mask(vocabulary.mask_words());
  std::string text;
  for (int step = 0; step < 3000; ++step) {
    if (matcher.CanEnd() && (!matcher.CanContinue() || rng() % 3 == 0)) {
      *complete = true;
      return text;
    }
    matcher.FillNextTokenMask(absl::MakeSpan(mask));
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocabulary.mask_size(); ++id) {
      if ((mask[id / 32] >> (id % 32)) & 1) allowed.push_back(id);
    }
    if (allowed.empty()) break;
    // Half the draws prefer a token that closes something, so that walks end.
    std::vector<int32_t> closing;
    for (int32_t id : allowed) {
      const char c = vocabulary.BytesOfId(id)[0];
      if (c == '"' || c == '}' || c == ']' || c == ',') closing.push_back(id);
    }
    const std::vector<int32_t>& pool = !closing.empty() && rng() % 2 == 0 ? closing : allowed;
    const int32_t token = pool[rng() % pool.size()];
    matcher.AcceptToken(token);
    text += vocabulary.BytesOfId(token);
  }
  *complete = false;
  return text;
}

int Main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: sample_tool SUITE.json WALKS SEED\n";
    return 2;
  }
  std::ifstream file(argv[1]);
  std::stringstream contents;
  contents << file.rdbuf();
  const nlohmann::ordered_json suite = nlohmann::ordered_json::parse(contents.str());
  const int walks = std::stoi(argv[2]);
  std::mt19937_64 rng(std::stoull(argv[3]));
  const auto vocabulary = SmallVocabulary();
  for (const nlohmann::ordered_json& entry : suite) {
    absl::StatusOr<std::shared_ptr<const CompiledGrammar>> grammar = Compile(entry, vocabulary);
    if (!grammar.ok()) {
      std::cout << nlohmann::json({{"name", entry["name"]}, {"error", grammar.status().ToString()}})
                << "\n";
      continue;
    }
    for (int i = 0; i < walks; ++i) {
      bool complete = false;
      const std::string text = Walk(Matcher(*grammar), rng, &complete);
      std::cout << nlohmann::json({{"name", entry["name"]}, {"text", text}, {"complete", complete}})
                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                << "\n";
    }
  }
  return 0;
}

}  // namespace
}  // namespace pagoda::constraints

int main(int argc, char** argv) { return pagoda::constraints::Main(argc, argv); }
