#include "scheduler/api/constraint_compiler.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "scheduler/api/field_error.h"
#include "scheduler/constraints/gbnf.h"
#include "scheduler/constraints/json_schema.h"
#include "scheduler/constraints/regex.h"

namespace pagoda::scheduler {
namespace {

using pagoda::v1::GenerateRequest;
using constraints::ExprId;
using constraints::GrammarBuilder;
using constraints::RuleId;

// The constraint's field name, for messages.
const char* FieldOf(const GenerateRequest& request) {
  switch (request.constraint_case()) {
    case GenerateRequest::kJsonSchema: return "json_schema";
    case GenerateRequest::kRegex: return "regex";
    case GenerateRequest::kChoice: return "choice";
    case GenerateRequest::kGrammar: return "grammar";
    case GenerateRequest::kJsonObject: return "json_object";
    default: return "constraint";
  }
}

bool HasConstraint(const GenerateRequest& request) {
  return request.constraint_case() != GenerateRequest::CONSTRAINT_NOT_SET &&
         !(request.constraint_case() == GenerateRequest::kJsonObject && !request.json_object());
}

absl::Status BuildInto(const GenerateRequest& request, GrammarBuilder& g) {
  const constraints::JsonGrammarOptions json_options{.any_whitespace =
                                                         !request.disable_any_whitespace()};
  switch (request.constraint_case()) {
    case GenerateRequest::kJsonSchema: {
      const nlohmann::ordered_json schema =
          nlohmann::ordered_json::parse(request.json_schema(), nullptr, /*allow_exceptions=*/false);
      if (schema.is_discarded()) return absl::InvalidArgumentError("not valid JSON");
      return constraints::BuildJsonSchemaGrammar(schema, json_options, g);
    }
    case GenerateRequest::kJsonObject:
      constraints::BuildJsonObjectGrammar(json_options, g);
      return absl::OkStatus();
    case GenerateRequest::kRegex:
    case GenerateRequest::kChoice: {
      const RuleId root = g.NewRule("root");
      g.SetRoot(root);
      if (request.has_choice()) {
        std::vector<ExprId> choices;
        for (const std::string& choice : request.choice().choices()) choices.push_back(g.Literal(choice));
        g.SetBody(root, g.Choice(std::move(choices)));
        return absl::OkStatus();
      }
      absl::StatusOr<ExprId> expr = constraints::CompileRegex(request.regex(), g);
      if (!expr.ok()) return expr.status();
      g.SetBody(root, *expr);
      return absl::OkStatus();
    }
    case GenerateRequest::kGrammar:
      return constraints::BuildGbnfGrammar(request.grammar(), g);
    default:
      return absl::InternalError("no constraint");
  }
}

}  // namespace

ConstraintCompiler::ConstraintCompiler(
    std::shared_ptr<const constraints::TokenVocabulary> vocabulary, size_t cache_entries,
    absl::Duration precompute_budget, const constraints::AutomatonLimits& limits)
    : vocabulary_(std::move(vocabulary)),
      cache_entries_(cache_entries),
      precompute_budget_(precompute_budget),
      limits_(limits) {}

absl::Status ConstraintCompiler::CheckSizes(const GenerateRequest& request) {
  switch (request.constraint_case()) {
    case GenerateRequest::kJsonSchema:
    case GenerateRequest::kGrammar: {
      const std::string& text =
          request.has_json_schema() ? request.json_schema() : request.grammar();
      if (text.size() > kMaxConstraintTextBytes) {
        return InvalidField(FieldOf(request),
                            absl::StrCat(text.size(), " bytes, at most ", kMaxConstraintTextBytes));
      }
      if (text.empty()) return InvalidField(FieldOf(request), "empty");
      return absl::OkStatus();
    }
    case GenerateRequest::kRegex:
      if (request.regex().size() > kMaxRegexBytes) {
        return InvalidField(
            "regex", absl::StrCat(request.regex().size(), " bytes, at most ", kMaxRegexBytes));
      }
      return absl::OkStatus();
    case GenerateRequest::kChoice:
      if (request.choice().choices_size() < 1 || request.choice().choices_size() > kMaxChoices) {
        return InvalidField("choice", absl::StrCat("needs 1 to ", kMaxChoices, " strings, got ",
                                                   request.choice().choices_size()));
      }
      for (const std::string& choice : request.choice().choices()) {
        if (choice.empty() || choice.size() > kMaxChoiceBytes) {
          return InvalidField("choice", absl::StrCat("each string needs 1 to ", kMaxChoiceBytes,
                                                     " bytes, got ", choice.size()));
        }
      }
      return absl::OkStatus();
    default:
      return absl::OkStatus();
  }
}

absl::StatusOr<std::shared_ptr<const constraints::CompiledGrammar>> ConstraintCompiler::Build(
    const GenerateRequest& request) const {
  GrammarBuilder g;
  if (absl::Status status = BuildInto(request, g); !status.ok()) {
    return InvalidField(FieldOf(request), status.message());
  }
  absl::StatusOr<std::shared_ptr<const constraints::CompiledGrammar>> grammar =
      constraints::CompiledGrammar::Create(g, vocabulary_, limits_);
  if (!grammar.ok()) return InvalidField(FieldOf(request), grammar.status().message());
  (*grammar)->Precompute(precompute_budget_);
  return grammar;
}

absl::StatusOr<std::shared_ptr<const constraints::CompiledGrammar>> ConstraintCompiler::Compile(
    const GenerateRequest& request) {
  if (!HasConstraint(request)) return nullptr;
  if (vocabulary_ == nullptr) {
    return InvalidField(
        FieldOf(request),
        "this model takes no constraint (its tokenizer cannot list its tokens' bytes)");
  }
  Key key = absl::StrCat(request.constraint_case(), request.disable_any_whitespace() ? "c" : "w",
                         ":");
  switch (request.constraint_case()) {
    case GenerateRequest::kJsonSchema: absl::StrAppend(&key, request.json_schema()); break;
    case GenerateRequest::kRegex: absl::StrAppend(&key, request.regex()); break;
    case GenerateRequest::kGrammar: absl::StrAppend(&key, request.grammar()); break;
    case GenerateRequest::kChoice:
      for (const std::string& choice : request.choice().choices()) {
        absl::StrAppend(&key, choice.size(), ":", choice);
      }
      break;
    default: break;
  }
  if (auto cached = Lookup(key); cached != nullptr) return cached;
  absl::StatusOr<std::shared_ptr<const constraints::CompiledGrammar>> grammar = Build(request);
  if (!grammar.ok()) return grammar.status();
  Insert(key, *grammar);
  return grammar;
}

std::shared_ptr<const constraints::CompiledGrammar> ConstraintCompiler::Lookup(const Key& key) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void ConstraintCompiler::Insert(const Key& key,
                                std::shared_ptr<const constraints::CompiledGrammar> grammar) {
  absl::MutexLock lock(&mu_);
  if (index_.contains(key)) return;
  lru_.emplace_front(key, std::move(grammar));
  index_.emplace(key, lru_.begin());
  while (lru_.size() > cache_entries_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

}  // namespace pagoda::scheduler
