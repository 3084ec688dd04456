#ifndef PAGODA_SCHEDULER_API_REQUEST_DETOKENIZER_H_
#define PAGODA_SCHEDULER_API_REQUEST_DETOKENIZER_H_

// RequestDetokenizer: incremental detokenizing of one sequence's output, so
// streamed text pieces concatenate to the whole decode and never split a
// UTF-8 character.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "text/tokenizer.h"

namespace pagoda::scheduler {

// Turns one sequence's generated tokens into text piece by piece, so that the
// concatenation of every piece equals the decoding of all the tokens at once.
// A token may hold only part of a multi-byte character (byte-fallback
// pieces); its text is held back until the character is complete, so a
// streamed piece never splits a UTF-8 character.
//
// Linear in the output length: each Append decodes only a short window, the
// tokens since the last emitted piece began (vLLM's prefix and read offsets),
// not the whole sequence. The window's first tokens give the new ones their
// context (a leading space that a tokenizer drops at the start of a decode,
// the start of a multi-byte character); the piece is the window's text past
// what those context tokens decode to alone. Flush decodes everything once.
// Not thread-safe.
class RequestDetokenizer {
 public:
  // `tokenizer` must outlive this object; null means no text.
  explicit RequestDetokenizer(const Tokenizer* tokenizer) : tokenizer_(tokenizer) {}

  // Adds tokens and returns the text that became final.
  std::string Append(absl::Span<const int32_t> token_ids);
  // Returns whatever is still held back (at the end of the sequence).
  std::string Flush();

 private:
  // The text of token_ids_[begin, end) ("" if the tokenizer fails).
  std::string Decode(size_t begin, size_t end) const;

  const Tokenizer* tokenizer_;
  std::vector<int> token_ids_;
  // token_ids_[prefix_offset_, read_offset_) are the context tokens: their
  // text was emitted before. Tokens from read_offset_ on are not emitted yet.
  size_t prefix_offset_ = 0;
  size_t read_offset_ = 0;
  std::string emitted_;  // Everything returned so far.
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_REQUEST_DETOKENIZER_H_
