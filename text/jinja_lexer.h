#ifndef PAGODA_TEXT_JINJA_LEXER_H_
#define PAGODA_TEXT_JINJA_LEXER_H_

// The lexical half of jinja_template.h's parser: template text cut into
// text, output and statement segments (whitespace control applied), and the
// inside of a tag cut into tokens. Used by jinja_parser.cc alone.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "text/jinja_value.h"

namespace pagoda::text::jinja {

// INVALID_ARGUMENT "chat template line LINE: WHAT": every parse error.
absl::Status Error(int line, const std::string& what);

// A run of template text, or the inside of one {{ }} or {% %} tag.
struct Segment {
  enum class Kind { kText, kOutput, kStatement };
  Kind kind;
  std::string content;
  int line;
};

// The template cut into segments, comments dropped and whitespace control
// ({%- -%}, a statement's own line) applied to the text around tags.
absl::StatusOr<std::vector<Segment>> Cut(const std::string& source);

struct Token {
  enum class Kind { kName, kNumber, kString, kOperator, kEnd };
  Kind kind;
  std::string text;
  Value value;
};

// The tokens of one tag's content, ending with a kEnd token; `line` is the
// tag's, for errors.
absl::StatusOr<std::vector<Token>> Tokenize(const std::string& text, int line);

}  // namespace pagoda::text::jinja

#endif  // PAGODA_TEXT_JINJA_LEXER_H_
