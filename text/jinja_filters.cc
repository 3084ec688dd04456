// Jinja's tests and filters that chat templates use (text/jinja_parser.cc
// refuses any other name).
#include <algorithm>
#include <cstdlib>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "text/jinja_builtins.h"

namespace pagoda::text::jinja {
namespace {

// Each nesting level repeats tojson's indent: a large one is gigabytes of
// blanks before the output limit can see them.
constexpr int64_t kMaxJsonIndent = 64;

}  // namespace

// ------------------------------------------------------------------ tests
// Jinja's tests that chat templates use (text/jinja_parser.cc refuses any
// other name): `value is name(args)`, and the test a select/reject filter
// names.
absl::StatusOr<bool> ApplyTest(const Expr& expr, const std::string& name, const Value& v,
                               const std::vector<Value>& args, int64_t* work_left) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number() && !v.is_bool();
  if (name == "integer") return v.is_int();
  if (name == "boolean") return v.is_bool();
  if (name == "mapping") return v.is_dict();
  if (name == "sequence" || name == "iterable") return v.is_list() || v.is_string() || v.is_dict();
  if (name == "true") return v.is_bool() && v.truthy();
  if (name == "false") return v.is_bool() && !v.truthy();
  if (name == "even" || name == "odd") {
    if (!v.is_int()) return Fail(expr, "even/odd of a non-integer");
    return (v.integer() % 2 == 0) == (name == "even");
  }
  if (name == "equalto" || name == "eq") {
    if (args.size() != 1) return Fail(expr, absl::StrCat("test ", name, " takes one value"));
    absl::StatusOr<bool> equal = Equal(v, args[0], work_left);
    if (!equal.ok()) return Fail(expr, std::string(equal.status().message()));
    return equal;
  }
  return Fail(expr, absl::StrCat("unsupported test ", name));
}

namespace {

// ------------------------------------------------------------------ filters
// Jinja's filters that chat templates use, looked up by name in kFilters
// (text/jinja_parser.cc refuses any other name); each gets the filtered
// value and the evaluated arguments.

// `value` printed within what the render's budget has left.
std::string Text(const FilterCall& call, const Value& value) {
  return ToText(value, TextLimit(*call.work_left));
}

absl::StatusOr<Value> UnsupportedFilter(const FilterCall& call) {
  return Fail(call.expr, absl::StrCat("unsupported filter ", call.expr.name));
}

absl::StatusOr<Value> TrimFilter(const FilterCall& call) {
  return Value(Strip(Text(call, call.input), kWhitespace, true, true));
}

absl::StatusOr<Value> StringFilter(const FilterCall& call) { return Value(Text(call, call.input)); }

// upper, lower and capitalize.
absl::StatusOr<Value> CaseFilter(const FilterCall& call) {
  return Value(Recased(Text(call, call.input), call.expr.name));
}

absl::StatusOr<Value> JsonOf(const FilterCall& call, int indent) {
  absl::StatusOr<std::string> json = ToJson(call.input, indent, TextLimit(*call.work_left));
  if (!json.ok()) return Fail(call.expr, std::string(json.status().message()));
  return Value(*std::move(json));
}

// tojson(indent) or tojson(indent=n); the positional one wins.
// As Python's json.dumps, a negative indent only inserts newlines (as 0).
absl::StatusOr<Value> ToJsonFilter(const FilterCall& call) {
  std::optional<int64_t> indent;
  for (const auto& [key, value] : call.keywords) {
    if (key == "indent" && value.is_int()) indent = value.integer();
  }
  if (!call.args.empty() && call.args[0].is_int()) indent = call.args[0].integer();
  if (!indent.has_value()) return JsonOf(call, -1);
  // Each nesting level repeats the indent: a large one is gigabytes of
  // blanks before the output limit can see them.
  if (*indent > kMaxJsonIndent) {
    return Fail(call.expr, absl::StrCat("tojson indent above ", kMaxJsonIndent));
  }
  return JsonOf(call, static_cast<int>(std::max<int64_t>(*indent, 0)));
}

// length and count; a string's length counts code points, as Python's.
absl::StatusOr<Value> LengthFilter(const FilterCall& call) {
  const Value& v = call.input;
  if (v.is_string()) return Value(static_cast<int64_t>(Characters(v.str()).size()));
  if (v.is_list()) return Value(static_cast<int64_t>(v.list().size()));
  if (v.is_dict()) return Value(static_cast<int64_t>(v.dict().size()));
  return Fail(call.expr, "length of a value without one");
}

// first and last: undefined for an empty or non-iterable value.
absl::StatusOr<Value> FirstOrLastFilter(const FilterCall& call) {
  absl::StatusOr<List> items = Iterate(call.input);
  if (!items.ok() || items->empty()) return Value();
  return call.expr.name == "first" ? items->front() : items->back();
}

absl::StatusOr<Value> ListFilter(const FilterCall& call) {
  absl::StatusOr<List> items = Iterate(call.input);
  if (!items.ok()) return Fail(call.expr, "list of a non-iterable");
  return Value(*std::move(items));
}

// A reversed string stays a string; anything else iterable becomes a list.
absl::StatusOr<Value> ReverseFilter(const FilterCall& call) {
  absl::StatusOr<List> items = Iterate(call.input);
  if (!items.ok()) return Fail(call.expr, "reverse of a non-iterable");
  std::reverse(items->begin(), items->end());
  if (call.input.is_string()) return Value(JoinCharacters(*items));
  return Value(*std::move(items));
}

absl::StatusOr<Value> JoinFilter(const FilterCall& call) {
  absl::StatusOr<List> items = Iterate(call.input);
  if (!items.ok()) return Fail(call.expr, "join of a non-iterable");
  const std::string separator = call.args.empty() ? "" : Text(call, call.args[0]);
  std::string joined;
  // Past the limit the result is refused as too much work (Eval's charge).
  const size_t limit = TextLimit(*call.work_left);
  for (size_t i = 0; i < items->size() && joined.size() <= limit; ++i) {
    if (i > 0) joined += separator;
    joined += Text(call, (*items)[i]);
  }
  return Value(std::move(joined));
}

// default(value, boolean) and its alias d: replaces an undefined input, or
// with boolean true any falsy one.
absl::StatusOr<Value> DefaultFilter(const FilterCall& call) {
  const bool boolean = call.args.size() > 1 && call.args[1].truthy();
  if (call.input.is_undefined() || (boolean && !call.input.truthy()))
    return call.args.empty() ? Value("") : call.args[0];
  return call.input;
}

// Numbers truncate; strings parse their leading digits; anything else is 0.
absl::StatusOr<Value> IntFilter(const FilterCall& call) {
  const Value& v = call.input;
  if (v.is_number()) return Value(static_cast<int64_t>(v.number()));
  if (v.is_string()) return Value(static_cast<int64_t>(std::strtoll(v.str().c_str(), nullptr, 10)));
  return Value(0);
}

absl::StatusOr<Value> ItemsFilter(const FilterCall& call) {
  if (!call.input.is_dict()) return UnsupportedFilter(call);
  return Value(DictItems(call.input.dict()));
}

// replace(old, new) with a non-empty old, as the method.
absl::StatusOr<Value> ReplaceFilter(const FilterCall& call) {
  if (call.args.size() != 2 || Text(call, call.args[0]).empty()) return UnsupportedFilter(call);
  return Value(absl::StrReplaceAll(Text(call, call.input),
                                   {{Text(call, call.args[0]), Text(call, call.args[1])}}));
}

// select(test, args...) and reject(test, args...): the items that pass
// (or fail) the named test, as a list.
absl::StatusOr<Value> SelectFilter(const FilterCall& call) {
  absl::StatusOr<List> items = Iterate(call.input);
  if (!items.ok()) return Fail(call.expr, absl::StrCat(call.expr.name, " of a non-iterable"));
  if (call.args.empty() || !call.args[0].is_string()) {
    return Fail(call.expr, absl::StrCat(call.expr.name, " needs a test name"));
  }
  const std::vector<Value> test_args(call.args.begin() + 1, call.args.end());
  const bool keep_passing = call.expr.name == "select";
  List out;
  for (const Value& item : *items) {
    absl::StatusOr<bool> passes =
        ApplyTest(call.expr, call.args[0].str(), item, test_args, call.work_left);
    if (!passes.ok()) return passes.status();
    if (*passes == keep_passing) out.push_back(item);
  }
  return Value(std::move(out));
}

struct FilterEntry {
  const char* name;
  absl::StatusOr<Value> (*call)(const FilterCall&);
};

constexpr FilterEntry kFilters[] = {
    {"trim", TrimFilter},        {"string", StringFilter},   {"upper", CaseFilter},
    {"lower", CaseFilter},       {"capitalize", CaseFilter}, {"tojson", ToJsonFilter},
    {"length", LengthFilter},    {"count", LengthFilter},    {"first", FirstOrLastFilter},
    {"last", FirstOrLastFilter}, {"list", ListFilter},       {"reverse", ReverseFilter},
    {"join", JoinFilter},        {"default", DefaultFilter}, {"d", DefaultFilter},
    {"int", IntFilter},          {"items", ItemsFilter},     {"replace", ReplaceFilter},
    {"select", SelectFilter},    {"reject", SelectFilter},
};

}  // namespace

absl::StatusOr<Value> ApplyFilter(const FilterCall& call) {
  for (const FilterEntry& filter : kFilters) {
    if (call.expr.name == filter.name) return filter.call(call);
  }
  return UnsupportedFilter(call);
}

}  // namespace pagoda::text::jinja
