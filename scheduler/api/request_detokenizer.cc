#include "scheduler/api/request_detokenizer.h"

#include <algorithm>

namespace pagoda::scheduler {
namespace {

// What decoders put in place of an incomplete UTF-8 sequence.
constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";

// Length of the longest prefix of `text` that does not end inside a UTF-8
// character.
size_t CompleteUtf8Prefix(const std::string& text) {
  size_t end = text.size();
  // Walk back over at most 3 continuation bytes to the lead byte.
  size_t i = end;
  int continuation = 0;
  while (i > 0 && continuation < 4 && (static_cast<unsigned char>(text[i - 1]) & 0xC0) == 0x80) {
    --i;
    ++continuation;
  }
  if (i == 0) return end;
  const unsigned char lead = static_cast<unsigned char>(text[i - 1]);
  int expected = 0;
  if ((lead & 0x80) == 0) {
    expected = 0;
  } else if ((lead & 0xE0) == 0xC0) {
    expected = 1;
  } else if ((lead & 0xF0) == 0xE0) {
    expected = 2;
  } else if ((lead & 0xF8) == 0xF0) {
    expected = 3;
  } else {
    return end;  // Not UTF-8 at all: emit as is.
  }
  if (continuation < expected) return i - 1;
  return end;
}

}  // namespace

std::string RequestDetokenizer::DecodeAll() const {
  auto text = tokenizer_->Decode(token_ids_);
  return text.ok() ? *text : std::string();
}

std::string RequestDetokenizer::Append(const std::vector<int32_t>& token_ids) {
  if (tokenizer_ == nullptr) return "";
  token_ids_.insert(token_ids_.end(), token_ids.begin(), token_ids.end());
  std::string text = DecodeAll();
  // Hold back a trailing partial character, whichever way the decoder shows it.
  size_t safe = CompleteUtf8Prefix(text);
  if (text.size() >= kReplacementCharacter.size() &&
      std::string_view(text).substr(text.size() - kReplacementCharacter.size()) ==
          kReplacementCharacter) {
    safe = std::min(safe, text.size() - kReplacementCharacter.size());
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
