#ifndef PAGODA_SCHEDULER_API_STOP_STRINGS_H_
#define PAGODA_SCHEDULER_API_STOP_STRINGS_H_

// StopStringMatcher: stop strings found in a sequence's detokenized text, the
// text that could still start one held back from the stream.

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace pagoda::scheduler {

// Watches one sequence's detokenized text for stop strings, as vLLM does:
// the text ends just before the earliest stop string (or just after it when
// `include_stop_string`). While none has appeared, text that could still be
// the start of one is held back, so a stream never shows a stop string or
// a prefix of one that the final text will not have. Not thread-safe.
class StopStringMatcher {
 public:
  // `stop_strings` must be non-empty strings; none means every call returns
  // its input.
  StopStringMatcher(std::vector<std::string> stop_strings, bool include_stop_string);

  // Adds `text` (whole UTF-8 characters) and returns what may be shown now.
  // After a stop string is found, stopped() is true and every later call
  // returns "".
  std::string Append(const std::string& text);
  // Returns the held-back text (at the end of the sequence).
  std::string Flush();
  bool stopped() const { return stopped_; }

 private:
  const std::vector<std::string> stop_strings_;
  const bool include_stop_string_;
  size_t longest_ = 0;   // Bytes of the longest stop string.
  std::string pending_;  // Text not shown yet.
  bool stopped_ = false;
};

// At most this many stop strings of at most kMaxStopStringBytes each.
inline constexpr int kMaxStopStrings = 16;
inline constexpr int kMaxStopStringBytes = 256;

// INVALID_ARGUMENT (naming `field`) unless `stop_strings` are within the
// bounds above, non-empty, valid UTF-8, and there is a tokenizer to make text.
absl::Status CheckStopStrings(const std::vector<std::string>& stop_strings, bool has_tokenizer,
                              const std::string& field);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_STOP_STRINGS_H_
