// Rendering for jinja_template.h: walks the tree with a stack of scopes
// (each for-loop iteration has its own, as in Jinja, so `set` inside a loop
// does not leak out; namespace() objects carry values across).
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "text/jinja_ast.h"
#include "text/jinja_builtins.h"

namespace pagoda::text::jinja {
namespace {

// Renders can nest only as deep as the template; loops are bounded by data.
constexpr size_t kMaxOutputBytes = kMaxTextBytes;
// Integers are int64 (Python's are unbounded): a result outside it is an
// error rather than a wrapped value.
constexpr char kOverflow[] = "integer overflow";
constexpr size_t kMaxListItems = size_t{1} << 20;

class Renderer {
 public:
  Renderer(const Value& context, int64_t max_work) : work_left_(max_work) {
    scopes_.push_back(context.is_dict() ? context.dict() : Dict());
  }
  // A namespace is the one value a template can change, so the one through
  // which a value can come to hold itself ({% set ns.me = ns %}, or a list
  // holding ns): emptying every namespace made here breaks such cycles,
  // which shared ownership alone would leak at every render.
  ~Renderer() {
    for (const std::shared_ptr<Dict>& ns : namespaces_) ns->clear();
  }
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  absl::Status Run(const Node& node, std::string* out);

 private:
  Value Lookup(const std::string& name) const {
    for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
      for (const auto& [key, value] : *scope) {
        if (key == name) return value;
      }
    }
    return Value();
  }
  void Assign(const std::string& name, Value value) {
    for (auto& [key, existing] : scopes_.back()) {
      if (key == name) {
        existing = std::move(value);
        return;
      }
    }
    scopes_.back().emplace_back(name, std::move(value));
  }

  absl::StatusOr<Value> Eval(const Expr& expr);
  absl::StatusOr<Value> MakeList(const Expr& expr);
  absl::StatusOr<Value> MakeDict(const Expr& expr);
  absl::StatusOr<Value> Attribute(const Expr& expr);
  absl::StatusOr<Value> Unary(const Expr& expr);
  absl::StatusOr<Value> Conditional(const Expr& expr);
  absl::StatusOr<Value> Binary(const Expr& expr);
  absl::StatusOr<Value> Arithmetic(const Expr& expr, const Value& a, const Value& b);
  absl::StatusOr<Value> Subscript(const Expr& expr, const Value& base, const Value& index);
  absl::StatusOr<Value> Slice(const Expr& expr);
  absl::Status EvalArguments(const Expr& expr, size_t first_keyword, std::vector<Value>* args,
                             Dict* keywords);
  absl::StatusOr<Value> Call(const Expr& expr);
  absl::StatusOr<Value> Filter(const Expr& expr);
  absl::StatusOr<bool> Test(const Expr& expr);
  absl::Status For(const Node& node, std::string* out);
  // Counts `units` of work against work_left_.
  absl::Status Charge(const Expr& expr, int64_t units);
  // Jinja's == with its comparisons charged.
  absl::StatusOr<bool> Equals(const Expr& expr, const Value& a, const Value& b);
  // Eval's work: the value of `expr`, uncharged.
  absl::StatusOr<Value> Compute(const Expr& expr);

  std::vector<Dict> scopes_;
  // Of the render's budget (kDefaultMaxRenderWork); Charge and Equal count
  // it down, filters and tests through FilterCall::work_left.
  int64_t work_left_;
  // Every namespace() this render made (see ~Renderer).
  std::vector<std::shared_ptr<Dict>> namespaces_;
  absl::flat_hash_set<const Dict*> namespace_set_;  // The same, to look up.
};


absl::Status Renderer::Run(const Node& node, std::string* out) {
  if (out->size() > kMaxOutputBytes)
    return absl::InvalidArgumentError("chat template output too large");
  switch (node.kind) {
    case Node::Kind::kText:
      out->append(node.text);
      return absl::OkStatus();
    case Node::Kind::kOutput: {
      absl::StatusOr<Value> value = Eval(*node.expr);
      if (!value.ok()) return value.status();
      const std::string text = ToText(*value, TextLimit(work_left_));
      if (absl::Status s = Charge(*node.expr, static_cast<int64_t>(text.size() / 16)); !s.ok()) {
        return s;
      }
      out->append(text);
      if (out->size() > kMaxOutputBytes)
        return absl::InvalidArgumentError("chat template output too large");
      return absl::OkStatus();
    }
    case Node::Kind::kBody:
      for (const auto& child : node.children) {
        absl::Status status = Run(*child, out);
        if (!status.ok()) return status;
      }
      return absl::OkStatus();
    case Node::Kind::kIf:
      for (size_t i = 0; i < node.conditions.size(); ++i) {
        bool take = node.conditions[i] == nullptr;
        if (!take) {
          absl::StatusOr<Value> condition = Eval(*node.conditions[i]);
          if (!condition.ok()) return condition.status();
          take = condition->truthy();
        }
        if (take) return Run(*node.children[i], out);
      }
      return absl::OkStatus();
    case Node::Kind::kFor:
      return For(node, out);
    case Node::Kind::kSet: {
      absl::StatusOr<Value> value = Eval(*node.expr);
      if (!value.ok()) return value.status();
      if (node.targets.size() == 1) {
        Assign(node.targets[0], *std::move(value));
        return absl::OkStatus();
      }
      const Value target = Lookup(node.targets[0]);
      // Only a namespace changes (as in Jinja): other dicts stay immutable,
      // so only a namespace can come to hold itself (see ~Renderer).
      if (!target.is_dict() || !namespace_set_.contains(&target.dict()))
        return Fail(*node.expr, absl::StrCat(node.targets[0], " is not a namespace"));
      target.set(node.targets[1], *std::move(value));
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

absl::Status Renderer::Charge(const Expr& expr, int64_t units) {
  work_left_ -= units;
  if (work_left_ >= 0) return absl::OkStatus();
  return Fail(expr, "the template does too much work for these messages");
}

absl::StatusOr<bool> Renderer::Equals(const Expr& expr, const Value& a, const Value& b) {
  absl::StatusOr<bool> equal = Equal(a, b, &work_left_);
  if (!equal.ok()) return Fail(expr, std::string(equal.status().message()));
  return equal;
}

// Every value an expression yields is charged (work_left_) and bounded:
// strings by the output bound, lists by kMaxListItems.
absl::StatusOr<Value> Renderer::Eval(const Expr& expr) {
  absl::StatusOr<Value> value = Compute(expr);
  if (!value.ok()) return value;
  int64_t units = 1;
  if (value->is_string()) {
    if (value->str().size() > kMaxOutputBytes) return Fail(expr, "string too long");
    units += static_cast<int64_t>(value->str().size() / 16);
  }
  const bool built = expr.kind != Expr::Kind::kName && expr.kind != Expr::Kind::kAttribute &&
                     expr.kind != Expr::Kind::kSubscript && expr.kind != Expr::Kind::kLiteral &&
                     expr.kind != Expr::Kind::kConditional;
  if (value->is_list()) {
    if (value->list().size() > kMaxListItems) return Fail(expr, "list too long");
    if (built) units += static_cast<int64_t>(value->list().size());
  }
  if (absl::Status s = Charge(expr, units); !s.ok()) return s;
  return value;
}

absl::Status Renderer::For(const Node& node, std::string* out) {
  absl::StatusOr<Value> iterable = Eval(*node.expr);
  if (!iterable.ok()) return iterable.status();
  absl::StatusOr<List> all = Iterate(*iterable);
  if (!all.ok()) return Fail(*node.expr, std::string(all.status().message()));
  List items;
  for (const Value& item : *all) {
    if (node.filter == nullptr) {
      items.push_back(item);
      continue;
    }
    scopes_.emplace_back();
    Assign(node.targets[0], item);
    absl::StatusOr<Value> keep = Eval(*node.filter);
    scopes_.pop_back();
    if (!keep.ok()) return keep.status();
    if (keep->truthy()) items.push_back(item);
  }
  if (items.empty())
    return node.children.size() > 1 ? Run(*node.children[1], out) : absl::OkStatus();
  const int64_t length = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < length; ++i) {
    if (absl::Status s = Charge(*node.expr, 1); !s.ok()) return s;
    scopes_.emplace_back();
    if (node.targets.size() == 1) {
      Assign(node.targets[0], items[i]);
    } else {
      if (!items[i].is_list() || items[i].list().size() != node.targets.size()) {
        scopes_.pop_back();
        return Fail(*node.expr, "cannot unpack a loop item into the loop variables");
      }
      for (size_t t = 0; t < node.targets.size(); ++t) Assign(node.targets[t], items[i].list()[t]);
    }
    Assign("loop", Value(Dict{{"index", Value(i + 1)},
                              {"index0", Value(i)},
                              {"revindex", Value(length - i)},
                              {"revindex0", Value(length - i - 1)},
                              {"first", Value(i == 0)},
                              {"last", Value(i == length - 1)},
                              {"length", Value(length)},
                              {"previtem", i > 0 ? items[i - 1] : Value()},
                              {"nextitem", i + 1 < length ? items[i + 1] : Value()}}));
    absl::Status status = Run(*node.children[0], out);
    scopes_.pop_back();
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> Renderer::Compute(const Expr& expr) {
  switch (expr.kind) {
    case Expr::Kind::kLiteral:
      return expr.value;
    case Expr::Kind::kName:
      return Lookup(expr.name);
    case Expr::Kind::kList:
      return MakeList(expr);
    case Expr::Kind::kDict:
      return MakeDict(expr);
    case Expr::Kind::kAttribute:
      return Attribute(expr);
    case Expr::Kind::kSubscript: {
      absl::StatusOr<Value> base = Eval(*expr.args[0]);
      if (!base.ok()) return base;
      absl::StatusOr<Value> index = Eval(*expr.args[1]);
      if (!index.ok()) return index;
      return Subscript(expr, *base, *index);
    }
    case Expr::Kind::kSlice:
      return Slice(expr);
    case Expr::Kind::kCall:
      return Call(expr);
    case Expr::Kind::kFilter:
      return Filter(expr);
    case Expr::Kind::kTest: {
      absl::StatusOr<bool> result = Test(expr);
      if (!result.ok()) return result.status();
      return Value(*result != expr.negate);
    }
    case Expr::Kind::kUnary:
      return Unary(expr);
    case Expr::Kind::kBinary:
      return Binary(expr);
    case Expr::Kind::kConditional:
      return Conditional(expr);
  }
  return Value();
}

// [a, b, ...]: the items in order.
absl::StatusOr<Value> Renderer::MakeList(const Expr& expr) {
  List list;
  for (const auto& arg : expr.args) {
    absl::StatusOr<Value> value = Eval(*arg);
    if (!value.ok()) return value;
    list.push_back(*std::move(value));
  }
  return Value(std::move(list));
}

// {k: v, ...}: args alternate keys and values; keys are printed to strings,
// as this Value's dicts are keyed by string.
absl::StatusOr<Value> Renderer::MakeDict(const Expr& expr) {
  Value dict(Dict{});
  for (size_t i = 0; i + 1 < expr.args.size(); i += 2) {
    absl::StatusOr<Value> key = Eval(*expr.args[i]);
    if (!key.ok()) return key;
    absl::StatusOr<Value> value = Eval(*expr.args[i + 1]);
    if (!value.ok()) return value;
    absl::StatusOr<std::string> name = KeyOf(expr, *key);
    if (!name.ok()) return name.status();
    dict.set(*name, *std::move(value));
  }
  return dict;
}

// base.name: a dict's entry; undefined on any other defined value.
absl::StatusOr<Value> Renderer::Attribute(const Expr& expr) {
  absl::StatusOr<Value> base = Eval(*expr.args[0]);
  if (!base.ok()) return base;
  if (base->is_undefined())  // Jinja raises UndefinedError here too.
    return Fail(expr, absl::StrCat("'", expr.name, "' of an undefined value"));
  if (base->is_dict()) return base->get(expr.name);
  return Value();
}

// "not x" or "-x".
absl::StatusOr<Value> Renderer::Unary(const Expr& expr) {
  absl::StatusOr<Value> value = Eval(*expr.args[0]);
  if (!value.ok()) return value;
  if (expr.name == "not") return Value(!value->truthy());
  if (value->is_int()) {
    if (value->integer() == std::numeric_limits<int64_t>::min()) return Fail(expr, kOverflow);
    return Value(-value->integer());
  }
  if (value->is_number()) return Value(-value->number());
  return Fail(expr, "unary minus of a non-number");
}

// "a if cond else b" (args: a, cond, b); without an else, undefined.
absl::StatusOr<Value> Renderer::Conditional(const Expr& expr) {
  absl::StatusOr<Value> condition = Eval(*expr.args[1]);
  if (!condition.ok()) return condition;
  if (condition->truthy()) return Eval(*expr.args[0]);
  return expr.args[2] != nullptr ? Eval(*expr.args[2]) : absl::StatusOr<Value>(Value());
}

absl::StatusOr<Value> Renderer::Binary(const Expr& expr) {
  absl::StatusOr<Value> left = Eval(*expr.args[0]);
  if (!left.ok()) return left;
  if (expr.name == "and") return left->truthy() ? Eval(*expr.args[1]) : left;
  if (expr.name == "or") return left->truthy() ? left : Eval(*expr.args[1]);
  absl::StatusOr<Value> right = Eval(*expr.args[1]);
  if (!right.ok()) return right;
  const Value& a = *left;
  const Value& b = *right;
  if (expr.name == "==" || expr.name == "!=") {
    absl::StatusOr<bool> equal = Equals(expr, a, b);
    if (!equal.ok()) return equal.status();
    return Value(*equal == (expr.name == "=="));
  }
  if (expr.name == "in" || expr.name == "not in") {
    bool found = false;
    if (b.is_string() && a.is_string()) {
      found = b.str().find(a.str()) != std::string::npos;
    } else if (b.is_list()) {
      for (size_t i = 0; i < b.list().size() && !found; ++i) {
        absl::StatusOr<bool> equal = Equals(expr, a, b.list()[i]);
        if (!equal.ok()) return equal.status();
        found = *equal;
      }
    } else if (b.is_dict() && a.is_string()) {
      found = !b.get(a.str()).is_undefined();
    } else if (!b.is_undefined()) {
      return Fail(expr, "'in' needs a string, list or dict on the right");
    }
    return Value(found != (expr.name == "not in"));
  }
  if (expr.name == "<" || expr.name == ">" || expr.name == "<=" || expr.name == ">=") {
    int order;
    if (a.is_number() && b.is_number()) {
      order = a.number() < b.number() ? -1 : (a.number() > b.number() ? 1 : 0);
    } else if (a.is_string() && b.is_string()) {
      order = a.str().compare(b.str());
    } else {
      return Fail(expr, absl::StrCat("cannot compare with ", expr.name));
    }
    if (expr.name == "<") return Value(order < 0);
    if (expr.name == ">") return Value(order > 0);
    if (expr.name == "<=") return Value(order <= 0);
    return Value(order >= 0);
  }
  if (expr.name == "~") {
    const size_t limit = TextLimit(work_left_);
    return Value(ToText(a, limit) + ToText(b, limit));
  }
  return Arithmetic(expr, a, b);
}

absl::StatusOr<Value> Renderer::Arithmetic(const Expr& expr, const Value& a, const Value& b) {
  if (expr.name == "+" && a.is_string() && b.is_string()) return Value(a.str() + b.str());
  if (expr.name == "+" && a.is_list() && b.is_list()) {
    List joined = a.list();
    joined.insert(joined.end(), b.list().begin(), b.list().end());
    return Value(std::move(joined));
  }
  if (expr.name == "*" && a.is_string() && b.is_int()) {
    std::string repeated;
    for (int64_t i = 0; i < b.integer() && repeated.size() <= kMaxOutputBytes; ++i)
      repeated += a.str();
    return Value(std::move(repeated));
  }
  if (!a.is_number() || !b.is_number() || a.is_bool() || b.is_bool()) {
    return Fail(expr, absl::StrCat("unsupported operand types for ", expr.name));
  }
  const bool integers = a.is_int() && b.is_int();
  if (expr.name == "/") {
    if (b.number() == 0) return Fail(expr, "division by zero");
    return Value(a.number() / b.number());
  }
  if (expr.name == "//" || expr.name == "%") {
    if (b.number() == 0) return Fail(expr, "division by zero");
    if (integers) {
      if (a.integer() == std::numeric_limits<int64_t>::min() && b.integer() == -1) {
        return Fail(expr, kOverflow);
      }
      // Python's floor division and modulo, from C++'s truncating ones
      // (never a - quotient * b, which can leave int64 where the result
      // does not).
      int64_t quotient = a.integer() / b.integer();
      int64_t remainder = a.integer() % b.integer();
      if (remainder != 0 && ((remainder < 0) != (b.integer() < 0))) {
        --quotient;
        remainder += b.integer();
      }
      return expr.name == "//" ? Value(quotient) : Value(remainder);
    }
    const double quotient = std::floor(a.number() / b.number());
    return expr.name == "//" ? Value(quotient) : Value(a.number() - quotient * b.number());
  }
  if (integers && (expr.name == "+" || expr.name == "-" || expr.name == "*")) {
    int64_t result = 0;
    const bool overflow =
        expr.name == "+"   ? __builtin_add_overflow(a.integer(), b.integer(), &result)
        : expr.name == "-" ? __builtin_sub_overflow(a.integer(), b.integer(), &result)
                           : __builtin_mul_overflow(a.integer(), b.integer(), &result);
    if (overflow) return Fail(expr, kOverflow);
    return Value(result);
  }
  if (expr.name == "+") return Value(a.number() + b.number());
  if (expr.name == "-") return Value(a.number() - b.number());
  if (expr.name == "*") return Value(a.number() * b.number());
  return Fail(expr, absl::StrCat("unsupported operator ", expr.name));
}

absl::StatusOr<Value> Renderer::Subscript(const Expr& expr, const Value& base, const Value& index) {
  if (base.is_dict()) {
    absl::StatusOr<std::string> key = KeyOf(expr, index);
    if (!key.ok()) return key.status();
    return base.get(*key);
  }
  if ((base.is_list() || base.is_string()) && index.is_int()) {
    const List chars = base.is_string() ? Characters(base.str()) : List();
    const List& items = base.is_list() ? base.list() : chars;
    int64_t i = index.integer();
    if (i < 0) i += static_cast<int64_t>(items.size());
    if (i < 0 || i >= static_cast<int64_t>(items.size())) return Value();
    return items[i];
  }
  if (base.is_undefined()) return Fail(expr, "subscript of an undefined value");
  return Value();
}

absl::StatusOr<Value> Renderer::Slice(const Expr& expr) {
  absl::StatusOr<Value> base = Eval(*expr.args[0]);
  if (!base.ok()) return base;
  int64_t bounds[3] = {0, 0, 1};
  bool given[3] = {false, false, false};
  for (int i = 0; i < 3; ++i) {
    if (expr.args[i + 1] == nullptr) continue;
    absl::StatusOr<Value> value = Eval(*expr.args[i + 1]);
    if (!value.ok()) return value;
    if (value->is_none()) continue;
    if (!value->is_int()) return Fail(expr, "slice bounds must be integers");
    bounds[i] = value->integer();
    given[i] = true;
  }
  const int64_t step = bounds[2];
  if (step == 0) return Fail(expr, "slice step 0");
  absl::StatusOr<List> items =
      base->is_string()
          ? Iterate(*base)
          : (base->is_list() ? absl::StatusOr<List>(base->list())
                             : absl::StatusOr<List>(absl::InvalidArgumentError("not sliceable")));
  if (!items.ok()) return Fail(expr, "only strings and lists can be sliced");
  const int64_t size = static_cast<int64_t>(items->size());
  auto clamp = [&](int64_t v, int64_t low, int64_t high) {
    if (v < 0) v += size;
    return std::max(low, std::min(high, v));
  };
  // Python's slice rules.
  int64_t start = given[0] ? clamp(bounds[0], step > 0 ? 0 : -1, step > 0 ? size : size - 1)
                           : (step > 0 ? 0 : size - 1);
  int64_t stop = given[1] ? clamp(bounds[1], step > 0 ? 0 : -1, step > 0 ? size : size - 1)
                          : (step > 0 ? size : -1);
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    out.push_back((*items)[i]);
    if (__builtin_add_overflow(i, step, &i)) break;  // Past either end.
  }
  if (base->is_string()) return Value(JoinCharacters(out));
  return Value(std::move(out));
}

// Evaluates expr.args[1...] in order into positional and keyword arguments.
// expr.keywords[first_keyword] names args[1]'s keyword: a call's keywords
// start with an empty one for the callee (args[0]), a filter's do not.
absl::Status Renderer::EvalArguments(const Expr& expr, size_t first_keyword,
                                     std::vector<Value>* args, Dict* keywords) {
  for (size_t i = 1; i < expr.args.size(); ++i) {
    absl::StatusOr<Value> value = Eval(*expr.args[i]);
    if (!value.ok()) return value.status();
    const std::string& keyword = expr.keywords[i - 1 + first_keyword];
    if (keyword.empty()) {
      args->push_back(*std::move(value));
    } else {
      keywords->emplace_back(keyword, *std::move(value));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> Renderer::Call(const Expr& expr) {
  std::vector<Value> args;
  Dict keywords;
  absl::Status status = EvalArguments(expr, 1, &args, &keywords);
  if (!status.ok()) return status;
  const Expr& callee = *expr.args[0];
  if (callee.kind == Expr::Kind::kAttribute) {
    absl::StatusOr<Value> self = Eval(*callee.args[0]);
    if (!self.ok()) return self;
    return CallMethod(expr, *self, callee.name, args);
  }
  if (callee.kind != Expr::Kind::kName) return Fail(expr, "only named functions can be called");
  if (callee.name == "raise_exception") {
    return Fail(expr, args.empty() ? "raise_exception" : ToText(args[0], TextLimit(work_left_)));
  }
  if (callee.name == "namespace") {
    Value ns(Dict{});
    for (auto& [key, value] : keywords) ns.set(key, value);
    namespaces_.push_back(std::get<std::shared_ptr<Dict>>(ns.data));
    namespace_set_.insert(&ns.dict());
    return ns;
  }
  if (callee.name == "range" && !args.empty() && args.size() <= 2 &&
      std::all_of(args.begin(), args.end(), [](const Value& v) { return v.is_int(); })) {
    const int64_t start = args.size() == 2 ? args[0].integer() : 0;
    const int64_t stop = args.back().integer();
    int64_t length = 0;
    if (__builtin_sub_overflow(stop, start, &length) || length > 1'000'000) {
      return Fail(expr, "range too large");
    }
    List out;
    for (int64_t i = start; i < stop; ++i) out.push_back(Value(i));
    return Value(std::move(out));
  }
  return Fail(expr, absl::StrCat("unknown function ", callee.name));
}


absl::StatusOr<Value> Renderer::Filter(const Expr& expr) {
  absl::StatusOr<Value> input = Eval(*expr.args[0]);
  if (!input.ok()) return input;
  std::vector<Value> args;
  Dict keywords;
  absl::Status status = EvalArguments(expr, 0, &args, &keywords);
  if (!status.ok()) return status;
  return ApplyFilter(FilterCall{expr, *input, args, keywords, &work_left_});
}

absl::StatusOr<bool> Renderer::Test(const Expr& expr) {
  absl::StatusOr<Value> input = Eval(*expr.args[0]);
  if (!input.ok()) return input.status();
  std::vector<Value> args;
  Dict keywords;
  absl::Status status = EvalArguments(expr, 0, &args, &keywords);
  if (!status.ok()) return status;
  return ApplyTest(expr, expr.name, *input, args, &work_left_);
}

}  // namespace

absl::StatusOr<std::string> RenderTree(const Node& root, const Value& context, int64_t max_work) {
  Renderer renderer(context, max_work);
  std::string out;
  absl::Status status = renderer.Run(root, &out);
  if (!status.ok()) return status;
  return out;
}

}  // namespace pagoda::text::jinja
