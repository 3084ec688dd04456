// Parsing for jinja_template.h: the lexer's segments (jinja_lexer.h) nested
// into a tree of statements, and expressions parsed by recursive descent
// with Jinja's precedence.
#include <cctype>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "text/jinja_ast.h"
#include "text/jinja_lexer.h"
#include "text/jinja_template.h"

namespace pagoda::text::jinja {

absl::StatusOr<std::string> RenderTree(const Node& root, const Value& context, int64_t max_work);

namespace {

// ------------------------------------------------------------------ expressions

// What jinja_render.cc implements; anything else is refused at parse time.
constexpr const char* kFilterNames[] = {"trim",   "string",  "upper",   "lower",   "capitalize",
                                        "tojson", "length",  "count",   "first",   "last",
                                        "list",   "reverse", "join",    "default", "d",
                                        "int",    "items",   "replace", "select",  "reject"};
constexpr const char* kTests[] = {
    "defined",  "undefined", "none", "string", "number", "integer", "boolean", "mapping",
    "sequence", "iterable",  "true", "false",  "even",   "odd",     "equalto", "eq"};
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
