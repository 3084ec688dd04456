// jinja_lexer.h: segments and tokens of a chat template, every error naming
// its line.

#include "text/jinja_lexer.h"

#include <cctype>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pagoda::text::jinja {

absl::Status Error(int line, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("chat template line ", line, ": ", what));
}

namespace {

int LineAt(const std::string& source, size_t pos) {
  int line = 1;
  for (size_t i = 0; i < pos && i < source.size(); ++i) line += source[i] == '\n';
  return line;
}

// lstrip_blocks: the spaces and tabs between the start of the source line
// and a block tag at `open` are dropped when nothing else precedes the tag
// on that line. `text_begin` is where the current text starts in `source`.
void StripLineIndent(const std::string& source, size_t text_begin, size_t open, std::string* text) {
  size_t line_start = open;
  while (line_start > 0 && (source[line_start - 1] == ' ' || source[line_start - 1] == '\t')) {
    --line_start;
  }
  if (line_start > 0 && source[line_start - 1] != '\n') return;
  if (line_start < text_begin) return;  // A tag earlier on this line.
  const size_t indent = open - line_start;
  if (indent <= text->size()) text->resize(text->size() - indent);
}

// The next "{{", "{%" or "{#" at or after `pos`; npos if there is none (a
// lone "{", also at the very end, is text).
size_t FindTagOpen(const std::string& source, size_t pos) {
  size_t open = source.find('{', pos);
  while (open != std::string::npos && open + 1 < source.size() && source[open + 1] != '{' &&
         source[open + 1] != '%' && source[open + 1] != '#') {
    open = source.find('{', open + 1);
  }
  if (open != std::string::npos && open + 1 >= source.size()) open = std::string::npos;
  return open;
}

// Where the closer of the tag opened at `open` ("}}", "%}" or "#}") starts;
// inside expressions a closer within a string literal does not count.
// npos if the tag is not closed.
size_t FindTagClose(const std::string& source, size_t open) {
  const char kind = source[open + 1];
  const std::string closer = kind == '{' ? "}}" : (kind == '%' ? "%}" : "#}");
  char quote = 0;
  for (size_t scan = open + 2; scan + 1 < source.size(); ++scan) {
    const char c = source[scan];
    if (kind != '#' && quote == 0 && (c == '\'' || c == '"')) {
      quote = c;
    } else if (quote != 0 && c == '\\') {
      ++scan;
    } else if (quote != 0 && c == quote) {
      quote = 0;
    } else if (quote == 0 && source.compare(scan, 2, closer) == 0) {
      return scan;
    }
  }
  return std::string::npos;
}

// Whitespace control on the text after a tag: a "-" before the previous
// closer strips all leading whitespace; otherwise trim_blocks drops one
// newline after a block or comment tag.
void TrimAfterTag(bool strip, bool newline, std::string* text) {
  if (strip) {
    text->erase(0, text->find_first_not_of(" \t\r\n"));
    if (text->find_first_not_of(" \t\r\n") == std::string::npos) text->clear();
  } else if (newline && !text->empty() && (*text)[0] == '\n') {
    text->erase(0, 1);
  }
}

// Whitespace control on the text (from `text_begin`) before the tag opened
// at `open`: a "-" after the opener strips all trailing whitespace; otherwise
// lstrip_blocks drops a block or comment tag's indent, unless a "+" follows
// the opener.
void TrimBeforeTag(const std::string& source, size_t text_begin, size_t open, std::string* text) {
  const char kind = source[open + 1];
  const char modifier = open + 2 < source.size() ? source[open + 2] : 0;
  if (modifier == '-') {
    const size_t end = text->find_last_not_of(" \t\r\n");
    text->resize(end == std::string::npos ? 0 : end + 1);
  } else if (kind != '{' && modifier != '+') {
    StripLineIndent(source, text_begin, open, text);
  }
}

}  // namespace

absl::StatusOr<std::vector<Segment>> Cut(const std::string& source) {
  std::vector<Segment> out;
  size_t pos = 0;
  bool strip_next = false;    // A "-" closed the previous tag.
  bool newline_next = false;  // trim_blocks: drop one newline after a block.
  while (pos <= source.size()) {
    const size_t open = FindTagOpen(source, pos);
    std::string text =
        source.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    TrimAfterTag(strip_next, newline_next, &text);
    strip_next = newline_next = false;
    if (open == std::string::npos) {
      if (!text.empty()) out.push_back({Segment::Kind::kText, text, LineAt(source, pos)});
      break;
    }
    TrimBeforeTag(source, pos, open, &text);
    if (!text.empty()) out.push_back({Segment::Kind::kText, text, LineAt(source, pos)});
    const size_t close = FindTagClose(source, open);
    if (close == std::string::npos) return Error(LineAt(source, open), "unclosed tag");
    // The content starts after the opener and its "-" or (not on "{{") "+".
    const char kind = source[open + 1];
    const char modifier = open + 2 < source.size() ? source[open + 2] : 0;
    size_t content_begin = open + 2;
    if (modifier == '-' || (modifier == '+' && kind != '{')) ++content_begin;
    size_t content_end = close;
    if (content_end > content_begin && source[content_end - 1] == '-') {
      strip_next = true;
      --content_end;
    } else if (kind != '{') {
      newline_next = true;
    }
    if (kind != '#') {
      out.push_back({kind == '{' ? Segment::Kind::kOutput : Segment::Kind::kStatement,
                     source.substr(content_begin, content_end - content_begin),
                     LineAt(source, open)});
    }
    pos = close + 2;
  }
  return out;
}

namespace {

// Each Scan* function reads one token starting at text[i] into `out` and
// returns where the token ends.

size_t ScanName(const std::string& text, size_t i, std::vector<Token>* out) {
  size_t end = i;
  while (end < text.size() &&
         (std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '_'))
    ++end;
  out->push_back({Token::Kind::kName, text.substr(i, end - i), Value()});
  return end;
}

// Digits, with at most one "." that a digit follows (so "1.x" is 1 then .x).
size_t ScanNumber(const std::string& text, size_t i, std::vector<Token>* out) {
  size_t end = i;
  bool is_float = false;
  while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) ||
                               (text[end] == '.' && !is_float && end + 1 < text.size() &&
                                std::isdigit(static_cast<unsigned char>(text[end + 1]))))) {
    is_float |= text[end] == '.';
    ++end;
  }
  const std::string number = text.substr(i, end - i);
  out->push_back({Token::Kind::kNumber, number,
                  is_float
                      ? Value(std::strtod(number.c_str(), nullptr))
                      : Value(static_cast<int64_t>(std::strtoll(number.c_str(), nullptr, 10)))});
  return end;
}

// A quoted string with the \n, \t and \r escapes; any other escaped
// character stands for itself.
absl::StatusOr<size_t> ScanString(const std::string& text, size_t i, int line,
                                  std::vector<Token>* out) {
  const char quote = text[i];
  std::string value;
  size_t end = i + 1;
  for (; end < text.size() && text[end] != quote; ++end) {
    if (text[end] == '\\' && end + 1 < text.size()) {
      const char escaped = text[++end];
      value += escaped == 'n' ? '\n' : escaped == 't' ? '\t' : escaped == 'r' ? '\r' : escaped;
    } else {
      value += text[end];
    }
  }
  if (end >= text.size()) return Error(line, "unterminated string");
  out->push_back({Token::Kind::kString, value, Value(value)});
  return end + 1;
}

// The longest operator at text[i] (two-character ones are listed first).
absl::StatusOr<size_t> ScanOperator(const std::string& text, size_t i, int line,
                                    std::vector<Token>* out) {
  static const char* kOperators[] = {"==", "!=", "<=", ">=", "//", "**", "+", "-", "*",
                                     "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                     "]",  "{",  "}",  ",",  ".",  ":",  "|"};
  for (const char* op : kOperators) {
    if (text.compare(i, std::char_traits<char>::length(op), op) == 0) {
      out->push_back({Token::Kind::kOperator, op, Value()});
      return i + std::char_traits<char>::length(op);
    }
  }
  return Error(line, absl::StrCat("unexpected character '", std::string(1, text[i]), "'"));
}

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(const std::string& text, int line) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    absl::StatusOr<size_t> end;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      end = ScanName(text, i, &out);
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      end = ScanNumber(text, i, &out);
    } else if (c == '\'' || c == '"') {
      end = ScanString(text, i, line, &out);
    } else {
      end = ScanOperator(text, i, line, &out);
    }
    if (!end.ok()) return end.status();
    i = *end;
  }
  out.push_back({Token::Kind::kEnd, "", Value()});
  return out;
}

}  // namespace pagoda::text::jinja
