#include "scheduler/api/request_detokenizer.h"

#include <string_view>

#include "text/utf8.h"

namespace pagoda::scheduler {
namespace {

// True if `text` may end inside a character that later tokens complete,
// whichever way the decoder shows it: raw partial bytes or U+FFFD.
bool EndsIncomplete(std::string_view text) {
  return CompleteUtf8PrefixLength(text) < text.size() ||
         text.ends_with(kUtf8ReplacementCharacter);
}

}  // namespace

std::string RequestDetokenizer::Decode(size_t begin, size_t end) const {
  const std::vector<int> window(token_ids_.begin() + begin, token_ids_.begin() + end);
  absl::StatusOr<std::string> text = tokenizer_->Decode(window);
  return text.ok() ? *std::move(text) : std::string();
}

std::string RequestDetokenizer::Append(absl::Span<const int32_t> token_ids) {
  if (tokenizer_ == nullptr) return "";
  token_ids_.insert(token_ids_.end(), token_ids.begin(), token_ids.end());
  const std::string context = Decode(prefix_offset_, read_offset_);
  std::string text = Decode(prefix_offset_, token_ids_.size());
  // Nothing new yet, a partial character, or a decoder whose text of the
  // context is not a prefix of the longer window's (then Flush settles it).
  if (text.size() <= context.size() || EndsIncomplete(text) || !std::string_view(text).starts_with(context)) {
    return "";
  }
  std::string piece = text.substr(context.size());
  prefix_offset_ = read_offset_;
  read_offset_ = token_ids_.size();
  emitted_ += piece;
  return piece;
}

std::string RequestDetokenizer::Flush() {
  if (tokenizer_ == nullptr) return "";
  // One whole decode at the end: what the windows held back, and the last
  // word on decoders whose windows disagree with the whole.
  const std::string text = Decode(0, token_ids_.size());
  read_offset_ = prefix_offset_ = token_ids_.size();
  if (text.size() <= emitted_.size() || !std::string_view(text).starts_with(emitted_)) return "";
  std::string piece = text.substr(emitted_.size());
  emitted_ = text;
  return piece;
}

}  // namespace pagoda::scheduler
