// Parsing for jinja_template.h: the template text is cut into text, output
// and statement segments (applying whitespace control), statements are
// nested into a tree, and expressions are parsed by recursive descent with
// Jinja's precedence.
#include <cctype>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "text/jinja_ast.h"
#include "text/jinja_template.h"

namespace pagoda::text::jinja {

absl::StatusOr<std::string> RenderTree(const Node& root, const Value& context, int64_t max_work);

namespace {

absl::Status Error(int line, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("chat template line ", line, ": ", what));
}

// ------------------------------------------------------------------ segments

struct Segment {
  enum class Kind { kText, kOutput, kStatement };
  Kind kind;
  std::string content;
  int line;
};

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

// ------------------------------------------------------------------ tokens

struct Token {
  enum class Kind { kName, kNumber, kString, kOperator, kEnd };
  Kind kind;
  std::string text;
  Value value;
};

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

// ------------------------------------------------------------------ expressions

// What jinja_render.cc implements; anything else is refused at parse time.
constexpr const char* kFilterNames[] = {"trim",   "string",  "upper", "lower", "capitalize", "tojson",
                                    "length", "count",   "first", "last",  "list",       "reverse",
                                    "join",   "default", "d",     "int",   "items",      "replace",
                                    "select", "reject"};
constexpr const char* kTests[] = {"defined", "undefined", "none",    "string",   "number",
                                  "integer", "boolean",   "mapping", "sequence", "iterable",
                                  "true",    "false",     "even",    "odd",      "equalto",
                                  "eq"};
template <size_t N>
bool IsSupported(const char* const (&names)[N], const std::string& name) {
  for (const char* candidate : names) {
    if (name == candidate) return true;
  }
  return false;
}

// How deep a template may nest, in expressions (each bracket, parenthesis,
// unary operator or conditional a level or two) and in blocks ({% if %} and
// {% for %}). Parsing, rendering and freeing the tree recurse once per
// level: the chat_template fuzzer overflowed the parser's stack with a few
// thousand `[`. Real templates nest a handful of levels.
constexpr int kMaxExpressionNesting = 256;
constexpr int kMaxBlockNesting = 64;

class ExprParser {
 public:
  ExprParser(std::vector<Token> tokens, int line) : tokens_(std::move(tokens)), line_(line) {}

  absl::StatusOr<ExprPtr> ParseExpression() {
    ExprPtr out = Expression();
    if (!status_.ok()) return status_;
    return out;
  }
  bool AtEnd() const { return tokens_[pos_].kind == Token::Kind::kEnd; }
  bool Accept(const std::string& text) {
    if (tokens_[pos_].kind != Token::Kind::kString && tokens_[pos_].text == text) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool PeekName(const std::string& text) const {
    return tokens_[pos_].kind == Token::Kind::kName && tokens_[pos_].text == text;
  }
  absl::StatusOr<std::string> Name() {
    if (tokens_[pos_].kind != Token::Kind::kName) {
      return Error(line_, absl::StrCat("expected a name, got '", tokens_[pos_].text, "'"));
    }
    return tokens_[pos_++].text;
  }
  const absl::Status& status() const { return status_; }
  void Fail(const std::string& what) {
    if (status_.ok()) status_ = Error(line_, what);
  }

 private:
  ExprPtr Make(Expr::Kind kind, std::string name = "") {
    auto expr = std::make_unique<Expr>();
    expr->kind = kind;
    expr->name = std::move(name);
    expr->line = line_;
    return expr;
  }
  ExprPtr Binary(std::string op, ExprPtr left, ExprPtr right) {
    ExprPtr expr = Make(Expr::Kind::kBinary, std::move(op));
    expr->args.push_back(std::move(left));
    expr->args.push_back(std::move(right));
    return expr;
  }
  void Expect(const std::string& text) {
    if (!Accept(text)) Fail(absl::StrCat("expected '", text, "', got '", tokens_[pos_].text, "'"));
  }

  // Counts one level of nesting while it lives; Fail()s past
  // kMaxExpressionNesting.
  class Nesting {
   public:
    explicit Nesting(ExprParser* parser) : parser_(parser) {
      if (++parser_->depth_ > kMaxExpressionNesting) {
        parser_->Fail(absl::StrCat("expression nested deeper than ", kMaxExpressionNesting));
      }
    }
    ~Nesting() { --parser_->depth_; }
    bool too_deep() const { return parser_->depth_ > kMaxExpressionNesting; }

   private:
    ExprParser* const parser_;
  };

  ExprPtr Expression() {
    const Nesting nesting(this);
    if (nesting.too_deep()) return Make(Expr::Kind::kLiteral);
    ExprPtr value = Or();
    if (status_.ok() && PeekName("if")) {
      ++pos_;
      ExprPtr conditional = Make(Expr::Kind::kConditional);
      conditional->args.push_back(std::move(value));
      conditional->args.push_back(Or());
      conditional->args.push_back(Accept("else") ? Expression() : nullptr);
      return conditional;
    }
    return value;
  }
  ExprPtr Or() {
    ExprPtr left = And();
    while (status_.ok() && Accept("or")) left = Binary("or", std::move(left), And());
    return left;
  }
  ExprPtr And() {
    ExprPtr left = Not();
    while (status_.ok() && Accept("and")) left = Binary("and", std::move(left), Not());
    return left;
  }
  ExprPtr Not() {
    const Nesting nesting(this);
    if (nesting.too_deep()) return Make(Expr::Kind::kLiteral);
    if (Accept("not")) {
      ExprPtr expr = Make(Expr::Kind::kUnary, "not");
      expr->args.push_back(Not());
      return expr;
    }
    return Compare();
  }
  ExprPtr Compare() {
    ExprPtr left = Add();
    while (status_.ok()) {
      std::string op;
      for (const char* candidate : {"==", "!=", "<=", ">=", "<", ">", "in"}) {
        if (Accept(candidate)) {
          op = candidate;
          break;
        }
      }
      if (op.empty() && PeekName("not") && tokens_[pos_ + 1].text == "in") {
        pos_ += 2;
        op = "not in";
      }
      if (op.empty()) break;
      left = Binary(op, std::move(left), Add());
    }
    return left;
  }
  ExprPtr Add() {
    ExprPtr left = Concat();
    while (status_.ok()) {
      if (Accept("+")) {
        left = Binary("+", std::move(left), Concat());
      } else if (Accept("-")) {
        left = Binary("-", std::move(left), Concat());
      } else {
        break;
      }
    }
    return left;
  }
  ExprPtr Concat() {
    ExprPtr left = Multiply();
    while (status_.ok() && Accept("~")) left = Binary("~", std::move(left), Multiply());
    return left;
  }
  ExprPtr Multiply() {
    ExprPtr left = Unary();
    while (status_.ok()) {
      std::string op;
      for (const char* candidate : {"//", "*", "/", "%"}) {
        if (Accept(candidate)) {
          op = candidate;
          break;
        }
      }
      if (op.empty()) break;
      left = Binary(op, std::move(left), Unary());
    }
    return left;
  }
  ExprPtr Unary() {
    const Nesting nesting(this);
    if (nesting.too_deep()) return Make(Expr::Kind::kLiteral);
    if (Accept("-")) {
      ExprPtr expr = Make(Expr::Kind::kUnary, "-");
      expr->args.push_back(Unary());
      return expr;
    }
    if (Accept("+")) return Unary();
    ExprPtr value = Postfix(Primary());
    return FiltersAndTests(std::move(value));
  }
  ExprPtr FiltersAndTests(ExprPtr value) {
    while (status_.ok()) {
      if (Accept("|")) {
        absl::StatusOr<std::string> name = Name();
        if (!name.ok()) {
          status_ = name.status();
          break;
        }
        if (!IsSupported(kFilterNames, *name)) Fail(absl::StrCat("unsupported filter ", *name));
        ExprPtr filter = Make(Expr::Kind::kFilter, *name);
        filter->args.push_back(std::move(value));
        if (Accept("(")) Arguments(filter.get());
        if (*name == "select" || *name == "reject") CheckNamedTest(*filter);
        value = std::move(filter);
      } else if (PeekName("is")) {
        ++pos_;
        ExprPtr test = Make(Expr::Kind::kTest);
        test->negate = Accept("not");
        absl::StatusOr<std::string> name = Name();
        if (!name.ok()) {
          status_ = name.status();
          break;
        }
        if (!IsSupported(kTests, *name)) Fail(absl::StrCat("unsupported test ", *name));
        test->name = *name;
        test->args.push_back(std::move(value));
        if (Accept("(")) Arguments(test.get());
        value = std::move(test);
      } else {
        break;
      }
    }
    return value;
  }
  // select/reject name their test in a string literal: refused here, like a
  // test written with `is`, when the renderer lacks it.
  void CheckNamedTest(const Expr& filter) {
    if (filter.args.size() < 2 || filter.args[1]->kind != Expr::Kind::kLiteral ||
        !filter.args[1]->value.is_string()) {
      Fail(absl::StrCat(filter.name, " needs a test name in quotes"));
    } else if (!IsSupported(kTests, filter.args[1]->value.str())) {
      Fail(absl::StrCat("unsupported test ", filter.args[1]->value.str()));
    }
  }
  // After "(": arguments up to ")", keywords recorded per argument.
  void Arguments(Expr* call) {
    while (status_.ok() && !Accept(")")) {
      std::string keyword;
      if (tokens_[pos_].kind == Token::Kind::kName && tokens_[pos_ + 1].text == "=") {
        keyword = tokens_[pos_].text;
        pos_ += 2;
      }
      call->args.push_back(Expression());
      call->keywords.push_back(keyword);
      if (!Accept(",")) {
        Expect(")");
        break;
      }
    }
  }
  ExprPtr Primary() {
    const Token& token = tokens_[pos_];
    if (token.kind == Token::Kind::kNumber || token.kind == Token::Kind::kString) return Literal();
    if (token.kind == Token::Kind::kName) return NameOrConstant();
    if (Accept("(")) return ParenthesizedOrTuple();
    if (Accept("[")) {
      ExprPtr list = Make(Expr::Kind::kList);
      Items(list.get(), "]");
      return list;
    }
    if (Accept("{")) return DictDisplay();
    Fail(absl::StrCat("unexpected '", token.text, "'"));
    return Make(Expr::Kind::kLiteral);
  }
  // A number or string; adjacent string literals concatenate.
  ExprPtr Literal() {
    ExprPtr literal = Make(Expr::Kind::kLiteral);
    literal->value = tokens_[pos_++].value;
    while (literal->value.is_string() && tokens_[pos_].kind == Token::Kind::kString) {
      literal->value = Value(literal->value.str() + tokens_[pos_++].text);
    }
    return literal;
  }
  // true, false and none (also True, False, None) are constants; any other
  // name is a variable.
  ExprPtr NameOrConstant() {
    const std::string& name = tokens_[pos_++].text;
    ExprPtr literal = Make(Expr::Kind::kLiteral);
    if (name == "true" || name == "True")
      literal->value = Value(true);
    else if (name == "false" || name == "False")
      literal->value = Value(false);
    else if (name == "none" || name == "None")
      literal->value = Value(None{});
    else
      return Make(Expr::Kind::kName, name);
    return literal;
  }
  // After "(": a parenthesized expression, or with a comma a tuple (kept as
  // a list).
  ExprPtr ParenthesizedOrTuple() {
    ExprPtr inner = Expression();
    if (!Accept(",")) {
      Expect(")");
      return inner;
    }
    ExprPtr list = Make(Expr::Kind::kList);
    list->args.push_back(std::move(inner));
    Items(list.get(), ")");
    return list;
  }
  // Comma-separated expressions up to `closer` (a trailing comma allowed),
  // appended to `list`'s args.
  void Items(Expr* list, const std::string& closer) {
    while (status_.ok() && !Accept(closer)) {
      list->args.push_back(Expression());
      if (!Accept(",")) {
        Expect(closer);
        break;
      }
    }
  }
  // After "{": key: value pairs up to "}", as alternating args.
  ExprPtr DictDisplay() {
    ExprPtr dict = Make(Expr::Kind::kDict);
    while (status_.ok() && !Accept("}")) {
      dict->args.push_back(Expression());
      Expect(":");
      dict->args.push_back(Expression());
      if (!Accept(",")) {
        Expect("}");
        break;
      }
    }
    return dict;
  }
  ExprPtr Postfix(ExprPtr value) {
    while (status_.ok()) {
      if (Accept(".")) {
        absl::StatusOr<std::string> name = Name();
        if (!name.ok()) {
          status_ = name.status();
          break;
        }
        ExprPtr attribute = Make(Expr::Kind::kAttribute, *name);
        attribute->args.push_back(std::move(value));
        value = std::move(attribute);
      } else if (Accept("[")) {
        value = Subscript(std::move(value));
      } else if (Accept("(")) {
        ExprPtr call = Make(Expr::Kind::kCall);
        call->args.push_back(std::move(value));
        call->keywords.push_back("");
        Arguments(call.get());
        value = std::move(call);
      } else {
        break;
      }
    }
    return value;
  }
  // After "[": an index or a slice.
  ExprPtr Subscript(ExprPtr value) {
    ExprPtr parts[3];
    int part = 0;
    bool slice = false;
    while (status_.ok() && !Accept("]")) {
      if (Accept(":")) {
        slice = true;
        if (++part > 2) Fail("bad slice");
        continue;
      }
      parts[part] = Expression();
    }
    if (!slice) {
      ExprPtr subscript = Make(Expr::Kind::kSubscript);
      subscript->args.push_back(std::move(value));
      subscript->args.push_back(std::move(parts[0]));
      if (subscript->args[1] == nullptr) Fail("empty subscript");
      return subscript;
    }
    ExprPtr out = Make(Expr::Kind::kSlice);
    out->args.push_back(std::move(value));
    for (ExprPtr& p : parts) out->args.push_back(std::move(p));
    return out;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int line_;
  absl::Status status_;
  int depth_ = 0;  // Nesting levels open (Nesting).
};

// ------------------------------------------------------------------ statements

class TreeBuilder {
 public:
  explicit TreeBuilder(std::vector<Segment> segments) : segments_(std::move(segments)) {}

  absl::StatusOr<std::unique_ptr<Node>> Build() {
    auto root = NewNode(Node::Kind::kBody, 1);
    std::string end_tag;
    absl::Status status = Body(root.get(), {}, &end_tag);
    if (!status.ok()) return status;
    if (!end_tag.empty()) return Error(line_, absl::StrCat("unexpected {% ", end_tag, " %}"));
    return root;
  }

 private:
  static std::unique_ptr<Node> NewNode(Node::Kind kind, int line) {
    auto node = std::make_unique<Node>();
    node->kind = kind;
    node->line = line;
    return node;
  }

  // Parses segments into `body` until a statement whose keyword is in
  // `stops`, which is returned in `stop` (empty at the end of the input).
  absl::Status Body(Node* body, const std::vector<std::string>& stops, std::string* stop) {
    struct Leave {
      int* depth;
      ~Leave() { --*depth; }
    } leave{&depth_};
    if (++depth_ > kMaxBlockNesting) {
      return Error(line_, absl::StrCat("blocks nested deeper than ", kMaxBlockNesting));
    }
    while (next_ < segments_.size()) {
      Segment& segment = segments_[next_++];
      line_ = segment.line;
      if (segment.kind == Segment::Kind::kText) {
        auto text = NewNode(Node::Kind::kText, line_);
        text->text = segment.content;
        body->children.push_back(std::move(text));
        continue;
      }
      absl::StatusOr<std::vector<Token>> tokens = Tokenize(segment.content, line_);
      if (!tokens.ok()) return tokens.status();
      ExprParser parser(*std::move(tokens), line_);
      if (segment.kind == Segment::Kind::kOutput) {
        auto output = NewNode(Node::Kind::kOutput, line_);
        absl::StatusOr<ExprPtr> expr = parser.ParseExpression();
        if (!expr.ok()) return expr.status();
        if (!parser.AtEnd()) return Error(line_, "unexpected text after the expression");
        output->expr = *std::move(expr);
        body->children.push_back(std::move(output));
        continue;
      }
      absl::StatusOr<std::string> keyword = parser.Name();
      if (!keyword.ok()) return keyword.status();
      for (const std::string& candidate : stops) {
        if (*keyword == candidate) {
          *stop = *keyword;
          pending_ = std::make_unique<ExprParser>(std::move(parser));
          return absl::OkStatus();
        }
      }
      absl::Status status;
      if (*keyword == "if") {
        status = If(body, parser);
      } else if (*keyword == "for") {
        status = For(body, parser);
      } else if (*keyword == "set") {
        status = Set(body, parser);
      } else {
        return Error(line_, absl::StrCat("unsupported tag {% ", *keyword, " %}"));
      }
      if (!status.ok()) return status;
    }
    *stop = "";
    return absl::OkStatus();
  }

  absl::StatusOr<ExprPtr> EndOfTag(ExprParser& parser, absl::StatusOr<ExprPtr> expr) {
    if (!expr.ok()) return expr;
    if (!parser.AtEnd()) return Error(line_, "unexpected text at the end of the tag");
    return expr;
  }

  absl::Status If(Node* body, ExprParser& parser) {
    auto node = NewNode(Node::Kind::kIf, line_);
    absl::StatusOr<ExprPtr> condition = EndOfTag(parser, parser.ParseExpression());
    while (true) {
      if (!condition.ok()) return condition.status();
      node->conditions.push_back(*std::move(condition));
      auto branch = NewNode(Node::Kind::kBody, line_);
      std::string stop;
      absl::Status status = Body(branch.get(), {"elif", "else", "endif"}, &stop);
      if (!status.ok()) return status;
      node->children.push_back(std::move(branch));
      if (stop.empty()) return Error(node->line, "{% if %} without {% endif %}");
      std::unique_ptr<ExprParser> tag = std::move(pending_);
      if (stop == "endif") break;
      if (stop == "else") {
        condition = ExprPtr();
        if (!tag->AtEnd()) return Error(line_, "unexpected text after else");
      } else {
        condition = EndOfTag(*tag, tag->ParseExpression());
      }
    }
    body->children.push_back(std::move(node));
    return absl::OkStatus();
  }

  absl::Status For(Node* body, ExprParser& parser) {
    auto node = NewNode(Node::Kind::kFor, line_);
    do {
      absl::StatusOr<std::string> target = parser.Name();
      if (!target.ok()) return target.status();
      node->targets.push_back(*target);
    } while (parser.Accept(","));
    if (!parser.Accept("in")) return Error(line_, "expected 'in' in {% for %}");
    // The iterable stops before a filter's "if" (no conditional expression).
    absl::StatusOr<ExprPtr> iterable = parser.ParseExpression();
    if (!iterable.ok()) return iterable.status();
    node->expr = *std::move(iterable);
    if (node->expr->kind == Expr::Kind::kConditional && node->expr->args[2] == nullptr) {
      node->filter = std::move(node->expr->args[1]);
      node->expr = std::move(node->expr->args[0]);
    }
    if (parser.PeekName("recursive")) return Error(line_, "recursive loops are not supported");
    if (!parser.AtEnd()) return Error(line_, "unexpected text in {% for %}");
    auto loop_body = NewNode(Node::Kind::kBody, line_);
    std::string stop;
    absl::Status status = Body(loop_body.get(), {"else", "endfor"}, &stop);
    if (!status.ok()) return status;
    node->children.push_back(std::move(loop_body));
    if (stop == "else") {
      pending_.reset();
      auto else_body = NewNode(Node::Kind::kBody, line_);
      status = Body(else_body.get(), {"endfor"}, &stop);
      if (!status.ok()) return status;
      node->children.push_back(std::move(else_body));
    }
    if (stop != "endfor") return Error(node->line, "{% for %} without {% endfor %}");
    pending_.reset();
    body->children.push_back(std::move(node));
    return absl::OkStatus();
  }

  absl::Status Set(Node* body, ExprParser& parser) {
    auto node = NewNode(Node::Kind::kSet, line_);
    absl::StatusOr<std::string> name = parser.Name();
    if (!name.ok()) return name.status();
    node->targets.push_back(*name);
    if (parser.Accept(".")) {
      absl::StatusOr<std::string> attribute = parser.Name();
      if (!attribute.ok()) return attribute.status();
      node->targets.push_back(*attribute);
    }
    if (!parser.Accept("=")) return Error(line_, "block {% set %} is not supported");
    absl::StatusOr<ExprPtr> value = EndOfTag(parser, parser.ParseExpression());
    if (!value.ok()) return value.status();
    node->expr = *std::move(value);
    body->children.push_back(std::move(node));
    return absl::OkStatus();
  }

  std::vector<Segment> segments_;
  size_t next_ = 0;
  int depth_ = 0;  // Bodies open.
  int line_ = 1;
  std::unique_ptr<ExprParser> pending_;  // The tag that ended the last Body.
};

}  // namespace

absl::StatusOr<Template> Template::Parse(const std::string& source, int64_t max_render_work) {
  absl::StatusOr<std::vector<Segment>> segments = Cut(source);
  if (!segments.ok()) return segments.status();
  absl::StatusOr<std::unique_ptr<Node>> root = TreeBuilder(*std::move(segments)).Build();
  if (!root.ok()) return root.status();
  Template out;
  out.root_ = std::shared_ptr<const Node>(std::move(*root));
  out.max_render_work_ = max_render_work;
  return out;
}

absl::StatusOr<std::string> Template::Render(const Value& context) const {
  return RenderTree(*root_, context, max_render_work_);
}

}  // namespace pagoda::text::jinja
