#include "scheduler/api/reasoning.h"

#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pagoda::scheduler {
namespace {

constexpr char kDeepSeekR1[] = "deepseek_r1";

// The id of the token whose text is `marker`: the last such id, as added
// tokens (where tokenizers keep such markers) come after the base vocabulary.
std::optional<int32_t> TokenWithText(const std::vector<std::optional<std::string>>& token_bytes,
                                     const std::string& marker) {
  for (size_t id = token_bytes.size(); id-- > 0;) {
    if (token_bytes[id].has_value() && *token_bytes[id] == marker) {
      return static_cast<int32_t>(id);
    }
  }
  return std::nullopt;
}

// The length of the longest end of `text` that begins `marker` (shorter than it).
size_t PartialMarkerAtEnd(const std::string& text, const std::string& marker) {
  for (size_t length = std::min(text.size(), marker.size() - 1); length > 0; --length) {
    if (text.compare(text.size() - length, length, marker, 0, length) == 0) return length;
  }
  return 0;
}

}  // namespace

absl::Status CheckReasoningParserName(const std::string& name) {
  if (name.empty() || name == kDeepSeekR1) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--reasoning-parser ", name, ": must be deepseek_r1 (the one this server has)"));
}

absl::StatusOr<std::optional<ReasoningMarkers>> FindReasoningMarkers(const std::string& name,
                                                                     const Tokenizer* tokenizer) {
  if (name.empty()) return std::optional<ReasoningMarkers>();
  const std::string flag = absl::StrCat("--reasoning-parser ", name);
  if (tokenizer == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(flag, ": the model has no tokenizer, so no text to read reasoning from"));
  }
  absl::StatusOr<std::vector<std::optional<std::string>>> token_bytes = tokenizer->TokenBytes();
  if (!token_bytes.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(flag, ": ", token_bytes.status().message()));
  }
  ReasoningMarkers markers{.start = "<think>", .end = "</think>"};
  for (auto [marker, id] :
       {std::pair{&markers.start, &markers.start_id}, std::pair{&markers.end, &markers.end_id}}) {
    const std::optional<int32_t> found = TokenWithText(*token_bytes, *marker);
    if (!found.has_value()) {
      return absl::FailedPreconditionError(absl::StrCat(
          flag, ": the tokenizer has no ", *marker, " token (a non-special token whose text is ",
          *marker, "): not a reasoning model"));
    }
    *id = *found;
  }
  return std::optional<ReasoningMarkers>(markers);
}

bool ReasoningEndedIn(const ReasoningMarkers& markers, absl::Span<const int32_t> prompt_ids) {
  for (auto id = prompt_ids.rbegin(); id != prompt_ids.rend(); ++id) {
    if (*id == markers.start_id) return false;
    if (*id == markers.end_id) return true;
  }
  return false;
}

ReasoningSplit SplitReasoning(const ReasoningMarkers& markers, const std::string& text) {
  std::string thinking = text;
  if (const size_t start = text.find(markers.start); start != std::string::npos) {
    thinking = text.substr(start + markers.start.size());
  }
  const size_t end = thinking.find(markers.end);
  if (end == std::string::npos) return {.reasoning = thinking, .content = std::nullopt};
  ReasoningSplit split{.reasoning = thinking.substr(0, end), .content = std::nullopt};
  std::string content = thinking.substr(end + markers.end.size());
  if (!content.empty()) split.content = std::move(content);
  return split;
}

void ReasoningTokenCounter::Add(const ReasoningMarkers& markers,
                                absl::Span<const int32_t> token_ids) {
  for (const int32_t id : token_ids) {
    if (ended_) return;
    if (id == markers.end_id) {
      ended_ = true;
    } else if (id != markers.start_id) {
      ++count_;
    }
  }
}

ReasoningStream::Pieces ReasoningStream::Feed(const std::string& text) {
  pending_ += text;
  Pieces out;
  Drain(&out, /*final=*/false);
  return out;
}

ReasoningStream::Pieces ReasoningStream::Finish() {
  Pieces out;
  Drain(&out, /*final=*/true);
  return out;
}

void ReasoningStream::Drain(Pieces* out, bool final) {
  while (!ended_) {
    const size_t end = pending_.find(markers_->end);
    const size_t start = started_ ? std::string::npos : pending_.find(markers_->start);
    const bool start_first =
        start != std::string::npos && (end == std::string::npos || start < end);
    if (start_first || end != std::string::npos) {
      const size_t at = start_first ? start : end;
      const size_t marker = start_first ? markers_->start.size() : markers_->end.size();
      out->reasoning += pending_.substr(0, at);
      pending_.erase(0, at + marker);
      (start_first ? started_ : ended_) = true;
      continue;
    }
    size_t held = 0;
    if (!final) {
      held = PartialMarkerAtEnd(pending_, markers_->end);
      if (!started_) held = std::max(held, PartialMarkerAtEnd(pending_, markers_->start));
    }
    out->reasoning += pending_.substr(0, pending_.size() - held);
    pending_.erase(0, pending_.size() - held);
    return;
  }
  out->content += pending_;
  pending_.clear();
}

}  // namespace pagoda::scheduler
