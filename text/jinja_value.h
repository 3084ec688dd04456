#ifndef PAGODA_TEXT_JINJA_VALUE_H_
#define PAGODA_TEXT_JINJA_VALUE_H_

// The values a Jinja template computes with (undefined, none, bool, numbers,
// strings, lists, dicts, namespaces, callables) and the bounds on their size and
// nesting.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace pagoda::text::jinja {

// The longest string a render builds or prints.
inline constexpr size_t kMaxTextBytes = 16 << 20;
// How deep ToText, ToJson and Equal follow lists and dicts: request JSON
// nests at most 64 levels, and a template can nest values without bound
// (a namespace that holds itself, or a list wrapped once per loop
// iteration). Past it, or for a value that holds itself, ToText prints
// "..." (as Python's repr does for the latter) and ToJson fails; Equal
// fails past it.
inline constexpr int kMaxNesting = 128;

struct Value;
using List = std::vector<Value>;
// Insertion-ordered, as Python dicts (tojson keeps the order).
using Dict = std::vector<std::pair<std::string, Value>>;

struct Undefined {};
struct None {};

// A Jinja value: Python's types as chat templates use them. Lists and dicts
// are shared (a namespace() is a dict that `set ns.x = ...` mutates).
struct Value {
  std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<List>,
               std::shared_ptr<Dict>>
      data;

  Value() = default;
  Value(None) : data(None{}) {}
  Value(bool b) : data(b) {}
  Value(int64_t i) : data(i) {}
  Value(int i) : data(static_cast<int64_t>(i)) {}
  Value(double d) : data(d) {}
  Value(std::string s) : data(std::move(s)) {}
  Value(const char* s) : data(std::string(s)) {}
  Value(List list) : data(std::make_shared<List>(std::move(list))) {}
  Value(Dict dict) : data(std::make_shared<Dict>(std::move(dict))) {}
  Value(const Value&) = default;
  Value(Value&&) = default;
  Value& operator=(const Value&) = default;
  Value& operator=(Value&&) = default;
  // Frees the lists and dicts only this value holds without recursing
  // into them: a template can nest a list a million levels deep, and a
  // recursive free would overflow the stack.
  ~Value();

  bool is_undefined() const { return std::holds_alternative<Undefined>(data); }
  bool is_none() const { return std::holds_alternative<None>(data); }
  bool is_bool() const { return std::holds_alternative<bool>(data); }
  bool is_int() const { return std::holds_alternative<int64_t>(data); }
  bool is_number() const { return is_int() || std::holds_alternative<double>(data); }
  bool is_string() const { return std::holds_alternative<std::string>(data); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<List>>(data); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<Dict>>(data); }

  const std::string& str() const { return std::get<std::string>(data); }
  List& list() const { return *std::get<std::shared_ptr<List>>(data); }
  Dict& dict() const { return *std::get<std::shared_ptr<Dict>>(data); }
  double number() const {
    return is_int() ? static_cast<double>(std::get<int64_t>(data)) : std::get<double>(data);
  }
  int64_t integer() const { return std::get<int64_t>(data); }

  // Python truthiness.
  bool truthy() const;
  // Dict lookup; Undefined when absent.
  Value get(const std::string& key) const;
  void set(const std::string& key, Value value) const;
};

// What {{ value }} prints (Python's str, with Jinja's "" for undefined);
// "..." for what nests deeper than kMaxNesting. Stops soon after
// `max_bytes` (shared lists can hold exponentially many paths): a longer
// result means "too long".
std::string ToText(const Value& value, size_t max_bytes = kMaxTextBytes);
// Python's json.dumps(value, ensure_ascii=False) as transformers' tojson
// filter: ", " and ": " separators, keys in insertion order; `indent` >= 0
// pretty-prints. INVALID_ARGUMENT past kMaxNesting or `max_bytes`.
absl::StatusOr<std::string> ToJson(const Value& value, int indent = -1,
                                   size_t max_bytes = kMaxTextBytes);
// Jinja's == (numbers across int/float, containers deeply), counting each
// value compared down from `*work_left` (shared lists can hold
// exponentially many paths). INVALID_ARGUMENT when it runs out, or past
// kMaxNesting.
absl::StatusOr<bool> Equal(const Value& a, const Value& b, int64_t* work_left);
Value FromJson(const nlohmann::json& json);
Value FromJson(const nlohmann::ordered_json& json);

}  // namespace pagoda::text::jinja

#endif  // PAGODA_TEXT_JINJA_VALUE_H_
