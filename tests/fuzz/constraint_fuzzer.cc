// Structured outputs from hostile request bytes: a GenerateRequest's
// constraint (JSON Schema, regex, GBNF grammar, choice, json_object) through
// ConstraintCompiler as RequestValidator runs it (size checks, then the
// parser of its kind, the grammar's automaton against the vocabulary,
// precomputed token classes), then a Matcher over the compiled grammar, as
// the worker's logits processing drives it: text the model "generated", and
// a few steps of next-token masks. (The api_request fuzzer's model takes no
// constraint, so its requests stop before any of this.)
//
// Input: a kind byte (its value mod 5: json_schema, regex, grammar, choice,
// json_object; bit 3: disable_any_whitespace), then the constraint's text
// (for choice, its strings separated by newlines), then optionally a NUL
// and the generated text.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "pagoda/v1/generation.pb.h"
#include "scheduler/api/constraint_compiler.h"
#include "scheduler/constraints/matcher.h"
#include "scheduler/constraints/token_vocabulary.h"
#include "tests/fuzz/fuzz_support.h"
#include "text/hf_tokenizer.h"

namespace {

using pagoda::fuzz::Check;
using pagoda::v1::GenerateRequest;
namespace constraints = pagoda::constraints;

// Next-token masks computed per input: each walks the vocabulary's trie.
constexpr int kMaskSteps = 4;

pagoda::scheduler::ConstraintCompiler& Compiler() {
  static pagoda::scheduler::ConstraintCompiler* compiler = [] {
    auto tokenizer = pagoda::HfTokenizer::FromJson(pagoda::fuzz::ByteLevelTokenizerJson());
    Check(tokenizer.ok(), "the fixture tokenizer loads");
    auto bytes = (*tokenizer)->TokenBytes();
    Check(bytes.ok(), "the fixture tokenizer lists its bytes");
    auto vocabulary =
        constraints::TokenVocabulary::Create(*std::move(bytes), (*tokenizer)->vocab_size());
    Check(vocabulary.ok(), "the fixture vocabulary builds");
    // No cache (each input compiles afresh) and a short precompute budget:
    // a run's time goes to parsing, compiling and matching. The automaton
    // bounds are a 64th of the service's (1,024 DFA states, 2^18 compile
    // steps; the test suites' grammars need at most 32,064): inputs that
    // compile up to them dominate the run's time (1.7 s each at the
    // service's bounds in this instrumented build), and this makes it about
    // 6 times faster (1,272 against 202 executions a second); the refusals
    // are reached the same way, and the unit tests check the service's own
    // bounds.
    constraints::AutomatonLimits limits;
    limits.max_nfa_states /= 64;
    limits.max_dfa_states /= 64;
    limits.max_compile_steps /= 64;
    return new pagoda::scheduler::ConstraintCompiler(*vocabulary, /*cache_entries=*/0,
                                                     absl::Milliseconds(1), limits);
  }();
  return *compiler;
}

GenerateRequest RequestOf(uint8_t kind, std::string_view text) {
  GenerateRequest request;
  request.set_disable_any_whitespace((kind & 8) != 0);
  switch (kind % 5) {
    case 0: request.set_json_schema(std::string(text)); break;
    case 1: request.set_regex(std::string(text)); break;
    case 2: request.set_grammar(std::string(text)); break;
    case 3:
      for (absl::string_view choice :
           absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
        request.mutable_choice()->add_choices(std::string(choice));
      }
      break;
    default: request.set_json_object(true); break;
  }
  return request;
}

bool Allowed(const std::vector<uint32_t>& mask, int32_t id) {
  return (mask[id / 32] >> (id % 32)) & 1;
}

// Masks and tokens agree: the mask's first allowed token is accepted, and
// a token it leaves out (the first, if any) is refused; nothing is allowed
// once the grammar cannot continue.
void WalkMasks(constraints::Matcher& matcher) {
  const constraints::TokenVocabulary& vocabulary = matcher.grammar().vocabulary();
  std::vector<uint32_t> mask(vocabulary.mask_words());
  for (int step = 0; step < kMaskSteps; ++step) {
    matcher.FillNextTokenMask(absl::MakeSpan(mask));
    int32_t allowed = -1;
    int32_t refused = -1;
    for (int32_t id = 0; id < vocabulary.mask_size(); ++id) {
      if (vocabulary.BytesOfId(id).empty()) continue;
      const bool is_allowed = Allowed(mask, id);
      if (is_allowed && allowed < 0) allowed = id;
      if (!is_allowed && refused < 0) refused = id;
    }
    if (!matcher.CanContinue()) Check(allowed < 0, "nothing allowed after the end");
    if (refused >= 0) {
      constraints::Matcher copy = matcher;
      Check(!copy.AcceptToken(refused), "a token the mask refuses is refused");
    }
    if (allowed < 0) return;
    if (matcher.AcceptToken(allowed)) continue;
    // Past the parses' bound the mask (computed stack by stack) may allow
    // what the whole set then refuses; nothing else may.
    Check(matcher.refused_as_ambiguous(), "a token the mask allows is accepted");
    return;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest = pagoda::fuzz::AsText(data + 1, size - 1);
  const size_t split = rest.find('\0');
  const GenerateRequest request = RequestOf(data[0], rest.substr(0, split));
  if (!pagoda::scheduler::ConstraintCompiler::CheckSizes(request).ok()) return 0;
  auto grammar = Compiler().Compile(request);
  if (!grammar.ok()) return 0;
  Check(*grammar != nullptr, "a constraint compiles to a grammar");
  constraints::Matcher matcher(*grammar);
  if (split != std::string_view::npos && !matcher.AcceptBytes(rest.substr(split + 1))) return 0;
  WalkMasks(matcher);
  return 0;
}
