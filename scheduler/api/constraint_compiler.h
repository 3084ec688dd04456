#ifndef PAGODA_SCHEDULER_API_CONSTRAINT_COMPILER_H_
#define PAGODA_SCHEDULER_API_CONSTRAINT_COMPILER_H_

// The client edge of structured outputs: a GenerateRequest's `constraint`
// (json_schema, regex, choice, grammar, json_object) bounded, compiled
// against the model's vocabulary (scheduler/constraints/) and cached by its
// text, so that every request with the same schema shares one grammar and
// its precomputed token classes. Part of RequestValidator; thread-safe.

#include <cstddef>
#include <list>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pagoda/v1/generation.pb.h"
#include "scheduler/constraints/compiled_grammar.h"
#include "scheduler/constraints/token_vocabulary.h"

namespace pagoda::scheduler {

// Bounds checked before any work on a constraint.
inline constexpr size_t kMaxConstraintTextBytes = 64 << 10;  // json_schema, grammar.
inline constexpr size_t kMaxRegexBytes = 4 << 10;
inline constexpr int kMaxChoices = 256;
inline constexpr size_t kMaxChoiceBytes = 1024;
// The most bytes a request's constraint can take in a GenerateRequest.
inline constexpr size_t kMaxConstraintRequestBytes =
    kMaxConstraintTextBytes + kMaxChoices * (kMaxChoiceBytes + 4) + 64;

class ConstraintCompiler {
 public:
  // `vocabulary` null: the model takes no constraint (no tokenizer, or one
  // that cannot list its tokens' bytes). `cache_entries` compiled grammars
  // are kept, least recently used dropped first; each new one precomputes
  // its states' token classes for up to `precompute_budget` (the rest are
  // computed when first used). `limits` bound each grammar's automaton (the
  // defaults are the service's; the fuzzer passes smaller ones to run faster).
  explicit ConstraintCompiler(std::shared_ptr<const constraints::TokenVocabulary> vocabulary,
                              size_t cache_entries = 128,
                              absl::Duration precompute_budget = absl::Milliseconds(100),
                              const constraints::AutomatonLimits& limits = {});

  // Sizes only, before any work: INVALID_ARGUMENT naming the field.
  static absl::Status CheckSizes(const pagoda::v1::GenerateRequest& request);

  // The request's grammar, or null when it has no constraint.
  // INVALID_ARGUMENT names the field ("json_schema: at /properties/a: ...")
  // for a constraint that does not compile or is refused, and for a model
  // that takes none.
  absl::StatusOr<std::shared_ptr<const constraints::CompiledGrammar>> Compile(
      const pagoda::v1::GenerateRequest& request);

  bool enabled() const { return vocabulary_ != nullptr; }

 private:
  using Key = std::string;  // Kind, options and text.
  absl::StatusOr<std::shared_ptr<const constraints::CompiledGrammar>> Build(
      const pagoda::v1::GenerateRequest& request) const;
  std::shared_ptr<const constraints::CompiledGrammar> Lookup(const Key& key);
  void Insert(const Key& key, std::shared_ptr<const constraints::CompiledGrammar> grammar);

  const std::shared_ptr<const constraints::TokenVocabulary> vocabulary_;
  const size_t cache_entries_;
  const absl::Duration precompute_budget_;
  const constraints::AutomatonLimits limits_;
  absl::Mutex mu_;
  // Most recently used first.
  std::list<std::pair<Key, std::shared_ptr<const constraints::CompiledGrammar>>> lru_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Key, decltype(lru_)::iterator> index_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_CONSTRAINT_COMPILER_H_
