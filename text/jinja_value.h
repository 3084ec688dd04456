#ifndef PAGODA_TEXT_JINJA_VALUE_H_
#define PAGODA_TEXT_JINJA_VALUE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "nlohmann/json.hpp"

namespace pagoda::text::jinja {

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

// What {{ value }} prints (Python's str, with Jinja's "" for undefined).
std::string ToText(const Value& value);
// Python's json.dumps(value, ensure_ascii=False) as transformers' tojson
// filter: ", " and ": " separators, keys in insertion order; `indent` >= 0
// pretty-prints.
std::string ToJson(const Value& value, int indent = -1);
// Jinja's == (numbers across int/float, containers deeply).
bool Equal(const Value& a, const Value& b);
Value FromJson(const nlohmann::json& json);
Value FromJson(const nlohmann::ordered_json& json);

}  // namespace pagoda::text::jinja

#endif  // PAGODA_TEXT_JINJA_VALUE_H_
