#include "scheduler/api/request_detokenizer.h"

#include <algorithm>

#include "common/utf8.h"

namespace pagoda::scheduler {

std::string RequestDetokenizer::DecodeAll() const {
  auto text = tokenizer_->Decode(token_ids_);
  return text.ok() ? *text : std::string();
}

std::string RequestDetokenizer::Append(const std::vector<int32_t>& token_ids) {
  if (tokenizer_ == nullptr) return "";
  token_ids_.insert(token_ids_.end(), token_ids.begin(), token_ids.end());
  std::string text = DecodeAll();
  // Hold back a trailing partial character, whichever way the decoder shows it.
  size_t safe = CompleteUtf8PrefixLength(text);
  if (text.size() >= kUtf8ReplacementCharacter.size() &&
      std::string_view(text).substr(text.size() - kUtf8ReplacementCharacter.size()) ==
          kUtf8ReplacementCharacter) {
    safe = std::min(safe, text.size() - kUtf8ReplacementCharacter.size());
  }
  if (safe <= emitted_.size() || text.compare(0, emitted_.size(), emitted_) != 0) return "";
  std::string piece = text.substr(emitted_.size(), safe - emitted_.size());
  emitted_ += piece;
  return piece;
}

std::string RequestDetokenizer::Flush() {
  if (tokenizer_ == nullptr) return "";
  std::string text = DecodeAll();
  if (text.size() <= emitted_.size() || text.compare(0, emitted_.size(), emitted_) != 0) return "";
  std::string piece = text.substr(emitted_.size());
  emitted_ = text;
  return piece;
}

}  // namespace pagoda::scheduler
