#ifndef PAGODA_SCHEDULER_API_REASONING_H_
#define PAGODA_SCHEDULER_API_REASONING_H_

// Reasoning outputs in /v1/chat/completions, as vLLM's --reasoning-parser
// gives them: a reasoning model (DeepSeek R1 and its Llama and Qwen
// distills, QwQ) thinks between <think> and </think> before it answers; the
// server returns the thinking as the message's (or delta's) "reasoning" and
// the rest as its "content". DeepSeek R1's chat templates put <think> in the
// prompt, so the output usually starts inside the thinking and only
// </think> ends it. Pure functions and a per-choice stream state;
// thread-compatible.

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "text/tokenizer.h"

namespace pagoda::scheduler {

// The reasoning markers of a parser and their token ids in the served
// model's vocabulary.
struct ReasoningMarkers {
  std::string start;  // "<think>"
  std::string end;    // "</think>"
  int32_t start_id = -1;
  int32_t end_id = -1;
};

// --reasoning-parser NAME: "" (none) or "deepseek_r1" (vLLM's name, which
// also serves QwQ). INVALID_ARGUMENT naming the supported parsers otherwise.
absl::Status CheckReasoningParserName(const std::string& name);

// The markers of parser `name` in `tokenizer`: FAILED_PRECONDITION, naming
// the marker, when the vocabulary has no token whose text is the marker
// (vLLM refuses such a model at start too); nullopt for "".
// REQUIRES: CheckReasoningParserName(name) is OK.
absl::StatusOr<std::optional<ReasoningMarkers>> FindReasoningMarkers(const std::string& name,
                                                                     const Tokenizer* tokenizer);

// Whether `prompt_ids` closed the thinking already: its last marker is the
// end one (vLLM's is_reasoning_end over a prompt, e.g. Qwen3's template
// with enable_thinking false writes an empty <think></think>).
bool ReasoningEndedIn(const ReasoningMarkers& markers, absl::Span<const int32_t> prompt_ids);

// A finished output split as vLLM's deepseek_r1 parser splits it: past the
// first start marker if there is one, the text before the first end marker
// is the reasoning and the text after it the content (null when empty); no
// end marker: all of it is reasoning (the thinking was cut short).
struct ReasoningSplit {
  std::optional<std::string> reasoning;
  std::optional<std::string> content;
};
ReasoningSplit SplitReasoning(const ReasoningMarkers& markers, const std::string& text);

// The output tokens that are thinking (usage.completion_tokens_details.
// reasoning_tokens): those before the first end marker, markers excluded.
// Counted across calls, so a stream adds each delta's tokens.
class ReasoningTokenCounter {
 public:
  void Add(const ReasoningMarkers& markers, absl::Span<const int32_t> token_ids);
  int count() const { return count_; }

 private:
  bool ended_ = false;
  int count_ = 0;
};

// One streamed choice's text, delta by delta: which of it is reasoning and
// which content. The markers never go out; a delta ending in what may be
// the start of a marker holds that part back until the next delta (or
// Finish) tells. Text before a start marker goes out as reasoning, as in
// vLLM's stream (the whole output cannot be seen in advance). Not
// thread-safe.
class ReasoningStream {
 public:
  explicit ReasoningStream(const ReasoningMarkers* markers) : markers_(markers) {}

  struct Pieces {
    std::string reasoning;
    std::string content;
  };
  Pieces Feed(const std::string& text);
  // The held-back rest, at the choice's end.
  Pieces Finish();

 private:
  // Moves what `pending_` tells for sure into `out`.
  void Drain(Pieces* out, bool final);

  const ReasoningMarkers* const markers_;
  bool started_ = false;  // A start marker was read.
  bool ended_ = false;    // The end marker was read: the rest is content.
  std::string pending_;   // Text not yet told reasoning or content.
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_REASONING_H_
