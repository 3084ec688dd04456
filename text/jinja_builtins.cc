// Python's str and dict methods that chat templates call, and the value
// helpers the renderer, the methods and the filters share.
#include <algorithm>
#include <cctype>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "text/jinja_builtins.h"
#include "text/utf8.h"

namespace pagoda::text::jinja {

absl::Status Fail(const Expr& expr, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("chat template line ", expr.line, ": ", what));
}

size_t TextLimit(int64_t work_left) {
  return static_cast<size_t>(
      std::min<int64_t>(kMaxTextBytes, (std::max<int64_t>(work_left, 0) + 1) * 16));
}

absl::StatusOr<std::string> KeyOf(const Expr& expr, const Value& key) {
  if (key.is_list() || key.is_dict()) return Fail(expr, "a list or dict is not a dict key");
  return ToText(key);
}

List Characters(const std::string& text) {
  List chars;
  for (size_t pos = 0; pos < text.size();) {
    size_t length = Utf8CharLength(text, pos);
    if (length == 0) length = 1;
    chars.push_back(Value(text.substr(pos, length)));
    pos += length;
  }
  return chars;
}

std::string JoinCharacters(const List& chars) {
  std::string text;
  for (const Value& c : chars) text += c.str();
  return text;
}

absl::StatusOr<List> Iterate(const Value& value) {
  if (value.is_list()) return value.list();
  if (value.is_dict()) {
    List keys;
    for (const auto& [key, item] : value.dict()) keys.push_back(Value(key));
    return keys;
  }
  if (value.is_string()) return Characters(value.str());
  if (value.is_undefined() || value.is_none()) return List();
  return absl::InvalidArgumentError("value is not iterable");
}

std::string Strip(const std::string& text, const std::string& chars, bool left, bool right) {
  const size_t begin = left ? text.find_first_not_of(chars) : 0;
  if (begin == std::string::npos) return "";
  const size_t end = right ? text.find_last_not_of(chars) : text.size() - 1;
  return text.substr(begin, end - begin + 1);
}

std::string Recased(std::string text, const std::string& how) {
  for (size_t i = 0; i < text.size(); ++i) {
    const bool up = how == "upper" || (how == "capitalize" && i == 0);
    text[i] = up ? std::toupper(static_cast<unsigned char>(text[i]))
                 : std::tolower(static_cast<unsigned char>(text[i]));
  }
  return text;
}

List DictItems(const Dict& dict) {
  List items;
  for (const auto& [key, value] : dict) items.push_back(Value(List{Value(key), value}));
  return items;
}

namespace {

// ------------------------------------------------------------------ methods
// Python's str and dict methods that chat templates call, looked up by name
// and receiver in kMethods; each gets the receiver and positional arguments.

struct MethodCall {
  const Expr& expr;
  const Value& self;
  const std::string& name;
  const std::vector<Value>& args;

  // Argument i if it is a string, else `fallback` (the Python default).
  std::string StringArg(size_t i, const std::string& fallback) const {
    return i < args.size() && args[i].is_string() ? args[i].str() : fallback;
  }
};

absl::StatusOr<Value> UnsupportedMethod(const MethodCall& call) {
  return Fail(call.expr, absl::StrCat("unsupported method ", call.name));
}

// strip, lstrip and rstrip: whitespace unless the characters are given.
absl::StatusOr<Value> StripMethod(const MethodCall& call) {
  return Value(Strip(call.self.str(), call.StringArg(0, kWhitespace), call.name != "rstrip",
                     call.name != "lstrip"));
}

absl::StatusOr<Value> StartsWithMethod(const MethodCall& call) {
  return Value(call.self.str().rfind(call.StringArg(0, ""), 0) == 0);
}

absl::StatusOr<Value> EndsWithMethod(const MethodCall& call) {
  const std::string& s = call.self.str();
  const std::string suffix = call.StringArg(0, "");
  return Value(s.size() >= suffix.size() &&
               s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0);
}

// upper and lower.
absl::StatusOr<Value> CaseMethod(const MethodCall& call) {
  return Value(Recased(call.self.str(), call.name));
}

// Only replace(old, new) with a non-empty old: Python's count argument and
// its rule for an empty old are not implemented.
absl::StatusOr<Value> ReplaceMethod(const MethodCall& call) {
  if (call.args.size() != 2 || call.StringArg(0, "").empty()) return UnsupportedMethod(call);
  return Value(
      absl::StrReplaceAll(call.self.str(), {{call.StringArg(0, ""), call.StringArg(1, "")}}));
}

// split() or split(None) splits on runs of whitespace, dropping empty parts;
// split(sep) keeps them. Python refuses an empty separator.
absl::StatusOr<Value> SplitMethod(const MethodCall& call) {
  const std::string& s = call.self.str();
  List parts;
  if (call.args.empty() || call.args[0].is_none()) {
    for (absl::string_view part :
         absl::StrSplit(s, absl::ByAnyChar(kWhitespace), absl::SkipEmpty())) {
      parts.push_back(Value(std::string(part)));
    }
  } else if (!call.StringArg(0, "").empty()) {
    for (absl::string_view part : absl::StrSplit(s, call.StringArg(0, ""))) {
      parts.push_back(Value(std::string(part)));
    }
  } else {
    return Fail(call.expr, "split with an empty separator");
  }
  return Value(std::move(parts));
}

absl::StatusOr<Value> ItemsMethod(const MethodCall& call) {
  return Value(DictItems(call.self.dict()));
}

// keys and values.
absl::StatusOr<Value> KeysOrValuesMethod(const MethodCall& call) {
  List out;
  for (const auto& [key, value] : call.self.dict())
    out.push_back(call.name == "keys" ? Value(key) : value);
  return Value(std::move(out));
}

// get(key[, default]): the default is None, as in Python.
absl::StatusOr<Value> GetMethod(const MethodCall& call) {
  if (call.args.empty()) return UnsupportedMethod(call);
  absl::StatusOr<std::string> key = KeyOf(call.expr, call.args[0]);
  if (!key.ok()) return key.status();
  Value found = call.self.get(*key);
  if (!found.is_undefined()) return found;
  return call.args.size() > 1 ? call.args[1] : Value(None{});
}

enum class Receiver { kString, kDict };

struct MethodEntry {
  const char* name;
  Receiver receiver;
  absl::StatusOr<Value> (*call)(const MethodCall&);
};

constexpr MethodEntry kMethods[] = {
    {"strip", Receiver::kString, StripMethod},
    {"lstrip", Receiver::kString, StripMethod},
    {"rstrip", Receiver::kString, StripMethod},
    {"startswith", Receiver::kString, StartsWithMethod},
    {"endswith", Receiver::kString, EndsWithMethod},
    {"upper", Receiver::kString, CaseMethod},
    {"lower", Receiver::kString, CaseMethod},
    {"replace", Receiver::kString, ReplaceMethod},
    {"split", Receiver::kString, SplitMethod},
    {"items", Receiver::kDict, ItemsMethod},
    {"keys", Receiver::kDict, KeysOrValuesMethod},
    {"values", Receiver::kDict, KeysOrValuesMethod},
    {"get", Receiver::kDict, GetMethod},
};

}  // namespace

absl::StatusOr<Value> CallMethod(const Expr& expr, const Value& self, const std::string& name,
                                 const std::vector<Value>& args) {
  const MethodCall call{expr, self, name, args};
  for (const MethodEntry& method : kMethods) {
    const bool receives = method.receiver == Receiver::kString ? self.is_string() : self.is_dict();
    if (receives && name == method.name) return method.call(call);
  }
  return UnsupportedMethod(call);
}

}  // namespace pagoda::text::jinja
