#ifndef PAGODA_TEXT_JINJA_BUILTINS_H_
#define PAGODA_TEXT_JINJA_BUILTINS_H_

// Jinja's built-ins that chat templates use, for the renderer
// (jinja_render.cc): Python's str and dict methods, Jinja's tests and
// filters, and the value helpers they share with it. Internal to text/.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "text/jinja_ast.h"

namespace pagoda::text::jinja {

// A render error: "chat template line N: what".
absl::Status Fail(const Expr& expr, const std::string& what);

// The most bytes a value printed now may take: what the budget left could
// pay for (Eval charges a string a unit per 16 bytes), at most
// kMaxTextBytes. Printing shared lists can take exponential time short of
// that.
size_t TextLimit(int64_t work_left);

// A dict key as this Value's dicts keep it (printed); a list or dict is no
// key (unhashable, as in Python), and printing one is unbounded work.
absl::StatusOr<std::string> KeyOf(const Expr& expr, const Value& key);

// A string's characters (code points, as Python indexes strings).
List Characters(const std::string& text);

// The inverse of Characters: a string from a list of one-character strings.
std::string JoinCharacters(const List& chars);

// The items a for-loop walks: a list's items, a dict's keys, a string's
// characters; none for undefined or None; an error for anything else.
absl::StatusOr<List> Iterate(const Value& value);

// Python's str.strip family: `chars` off the left and/or right end.
std::string Strip(const std::string& text, const std::string& chars, bool left, bool right);
inline constexpr char kWhitespace[] = " \t\n\r\f\v";

// `how` is "upper", "lower" or "capitalize" (first byte up, the rest down);
// byte by byte, as std::toupper in the C locale.
std::string Recased(std::string text, const std::string& how);

// dict.items() and the items filter: [key, value] pairs in insertion order.
List DictItems(const Dict& dict);

// self.name(args...) for the str and dict methods chat templates call.
absl::StatusOr<Value> CallMethod(const Expr& expr, const Value& self, const std::string& name,
                                 const std::vector<Value>& args);

// `value is name(args)`, and the test a select/reject filter names.
// `work_left` is the render's budget, charged for comparisons.
absl::StatusOr<bool> ApplyTest(const Expr& expr, const std::string& name, const Value& v,
                               const std::vector<Value>& args, int64_t* work_left);

// One filter application: `input | expr.name(args, keywords)`.
struct FilterCall {
  const Expr& expr;  // expr.name is the filter's name.
  const Value& input;
  const std::vector<Value>& args;
  const Dict& keywords;
  int64_t* work_left;  // Of the render's budget, for what a filter compares.
};

// The filter expr.name applied; an error for a filter not supported.
absl::StatusOr<Value> ApplyFilter(const FilterCall& call);

}  // namespace pagoda::text::jinja

#endif  // PAGODA_TEXT_JINJA_BUILTINS_H_
