#ifndef PAGODA_SCHEDULER_API_REQUEST_DETOKENIZER_H_
#define PAGODA_SCHEDULER_API_REQUEST_DETOKENIZER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/tokenizer.h"

namespace pagoda::scheduler {

// Turns one sequence's generated tokens into text piece by piece, so that the
// concatenation of every piece equals the decoding of all the tokens at once.
// A token may hold only part of a multi-byte character (byte-fallback
// pieces); its text is held back until the character is complete, so a
// streamed piece never splits a UTF-8 character.
// Not thread-safe.
class RequestDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  explicit RequestDetokenizer(const Tokenizer* tokenizer) : tokenizer_(tokenizer) {}

  // Adds tokens and returns the text that became final.
  std::string Append(const std::vector<int32_t>& token_ids);
  // Returns whatever is still held back (at the end of the sequence).
  std::string Flush();

 private:
  // The text of all tokens so far and how much of it is safe to emit.
  std::string DecodeAll() const;

  const Tokenizer* tokenizer_;
  std::vector<int> token_ids_;
  std::string emitted_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_REQUEST_DETOKENIZER_H_
