#include "text/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pagoda::text::jinja {

bool Value::truthy() const {
  if (is_undefined() || is_none()) return false;
  if (is_bool()) return std::get<bool>(data);
  if (is_number()) return number() != 0;
  if (is_string()) return !str().empty();
  if (is_list()) return !list().empty();
  return !dict().empty();
}

Value Value::get(const std::string& key) const {
  if (!is_dict()) return Value();
  for (const auto& [name, value] : dict()) {
    if (name == key) return value;
  }
  return Value();
}

void Value::set(const std::string& key, Value value) const {
  for (auto& [name, existing] : dict()) {
    if (name == key) {
      existing = std::move(value);
      return;
    }
  }
  dict().emplace_back(key, std::move(value));
}

namespace {

std::string PythonFloat(double value) {
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (std::isnan(value)) return "nan";
  char buffer[32];
  // Shortest repr that round-trips, as Python prints floats.
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  std::string out = buffer;
  if (out.find_first_of(".en") == std::string::npos) out += ".0";
  return out;
}

void JsonString(const std::string& text, std::string* out) {
  *out += '"';
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof(buffer), "\\u%04x", c);
          *out += buffer;
        } else {
          *out += static_cast<char>(c);
        }
    }
  }
  *out += '"';
}

void AppendQuoted(const std::string& text, std::string* out) {
  *out += '\'';
  for (char c : text) {
    if (c == '\'' || c == '\\') *out += '\\';
    if (c == '\n') {
      *out += "\\n";
      continue;
    }
    *out += c;
  }
  *out += '\'';
}

// The lists and dicts a walk is inside, outermost first: one met again holds
// itself (Python's repr prints it as "...", its json.dumps refuses it).
using Path = std::vector<const void*>;

const void* ContainerOf(const Value& value) {
  return value.is_list() ? static_cast<const void*>(&value.list()) : &value.dict();
}

bool OnPath(const Path& path, const Value& value) {
  return std::find(path.begin(), path.end(), ContainerOf(value)) != path.end();
}

void AppendText(const Value& value, Path& path, size_t max_bytes, std::string* out);

// Python's repr of a value inside a list or dict.
void AppendRepr(const Value& value, Path& path, size_t max_bytes, std::string* out) {
  if (value.is_string()) return AppendQuoted(value.str(), out);
  AppendText(value, path, max_bytes, out);
}

void AppendText(const Value& value, Path& path, size_t max_bytes, std::string* out) {
  if (value.is_undefined()) return;
  if (value.is_none()) *out += "None";
  if (value.is_bool()) *out += std::get<bool>(value.data) ? "True" : "False";
  if (value.is_int()) absl::StrAppend(out, value.integer());
  if (value.is_number() && !value.is_int()) *out += PythonFloat(value.number());
  if (value.is_string()) *out += value.str();
  if (!value.is_list() && !value.is_dict()) return;
  if (path.size() >= static_cast<size_t>(kMaxNesting) || OnPath(path, value)) {
    *out += "...";
    return;
  }
  path.push_back(ContainerOf(value));
  const bool is_list = value.is_list();
  const size_t size = is_list ? value.list().size() : value.dict().size();
  *out += is_list ? '[' : '{';
  for (size_t i = 0; i < size && out->size() <= max_bytes; ++i) {
    if (i > 0) *out += ", ";
    if (!is_list) {
      AppendQuoted(value.dict()[i].first, out);
      *out += ": ";
    }
    AppendRepr(is_list ? value.list()[i] : value.dict()[i].second, path, max_bytes, out);
  }
  *out += is_list ? ']' : '}';
  path.pop_back();
}

// False past kMaxNesting or for a value that holds itself; stops soon after
// `max_bytes`.
bool AppendJson(const Value& value, int indent, Path& path, size_t max_bytes, std::string* out) {
  if (value.is_undefined() || value.is_none()) {
    *out += "null";
  } else if (value.is_bool()) {
    *out += std::get<bool>(value.data) ? "true" : "false";
  } else if (value.is_int()) {
    absl::StrAppend(out, value.integer());
  } else if (value.is_number()) {
    *out += PythonFloat(value.number());
  } else if (value.is_string()) {
    JsonString(value.str(), out);
  }
  if (!value.is_list() && !value.is_dict()) return true;
  if (path.size() >= static_cast<size_t>(kMaxNesting) || OnPath(path, value)) return false;
  const size_t depth = path.size();
  const bool is_list = value.is_list();
  const size_t size = is_list ? value.list().size() : value.dict().size();
  if (size == 0) {
    *out += is_list ? "[]" : "{}";
    return true;
  }
  const std::string newline =
      indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent) * (depth + 1), ' ') : "";
  *out += is_list ? '[' : '{';
  for (size_t i = 0; i < size && out->size() <= max_bytes; ++i) {
    if (i > 0) *out += indent >= 0 ? "," : ", ";
    *out += newline;
    if (!is_list) {
      JsonString(value.dict()[i].first, out);
      *out += ": ";
    }
    path.push_back(ContainerOf(value));
    const bool appended = AppendJson(is_list ? value.list()[i] : value.dict()[i].second, indent,
                                     path, max_bytes, out);
    path.pop_back();
    if (!appended) return false;
  }
  if (indent >= 0) *out += "\n" + std::string(static_cast<size_t>(indent) * depth, ' ');
  *out += is_list ? ']' : '}';
  return true;
}

absl::Status TooDeep(const char* what) {
  return absl::InvalidArgumentError(absl::StrCat(what, " values nested deeper than ", kMaxNesting,
                                                 " levels (or that hold themselves)"));
}

// Equal `depth` levels down.
absl::StatusOr<bool> EqualAt(const Value& a, const Value& b, int depth, int64_t* work_left) {
  if (--*work_left < 0) {
    return absl::InvalidArgumentError("the template does too much work comparing values");
  }
  if (a.is_number() && b.is_number()) return a.number() == b.number();
  if (a.is_bool() && b.is_bool()) return std::get<bool>(a.data) == std::get<bool>(b.data);
  if (a.is_string() && b.is_string()) return a.str() == b.str();
  if ((a.is_none() && b.is_none()) || (a.is_undefined() && b.is_undefined())) return true;
  if (a.data.index() != b.data.index() || (!a.is_list() && !a.is_dict())) return false;
  // The same list or dict: equal (Python's identity shortcut).
  if (a.is_list() ? &a.list() == &b.list() : &a.dict() == &b.dict()) return true;
  if (depth >= kMaxNesting) return TooDeep("comparing");
  if (a.is_list()) {
    if (a.list().size() != b.list().size()) return false;
    for (size_t i = 0; i < a.list().size(); ++i) {
      absl::StatusOr<bool> equal = EqualAt(a.list()[i], b.list()[i], depth + 1, work_left);
      if (!equal.ok() || !*equal) return equal;
    }
    return true;
  }
  if (a.dict().size() != b.dict().size()) return false;
  for (const auto& [key, value] : a.dict()) {
    absl::StatusOr<bool> equal = EqualAt(value, b.get(key), depth + 1, work_left);
    if (!equal.ok() || !*equal) return equal;
  }
  return true;
}

// Whether `value` holds the only reference to a list or dict.
bool HoldsLastContainer(const Value& value) {
  if (const auto* list = std::get_if<std::shared_ptr<List>>(&value.data)) {
    return *list != nullptr && list->use_count() == 1;
  }
  if (const auto* dict = std::get_if<std::shared_ptr<Dict>>(&value.data)) {
    return *dict != nullptr && dict->use_count() == 1;
  }
  return false;
}

}  // namespace

std::string ToText(const Value& value, size_t max_bytes) {
  if (value.is_string()) return value.str();
  std::string out;
  Path path;
  AppendText(value, path, max_bytes, &out);
  return out;
}

absl::StatusOr<std::string> ToJson(const Value& value, int indent, size_t max_bytes) {
  std::string out;
  Path path;
  if (!AppendJson(value, indent, path, max_bytes, &out)) return TooDeep("tojson of");
  if (out.size() > max_bytes) return absl::InvalidArgumentError("tojson: string too long");
  return out;
}

absl::StatusOr<bool> Equal(const Value& a, const Value& b, int64_t* work_left) {
  return EqualAt(a, b, 0, work_left);
}

// Each list or dict this value held last is emptied here, its items moved
// to a stack first: freeing them then never recurses more than one level.
Value::~Value() {
  if (!HoldsLastContainer(*this)) return;
  // While one destructor unwinds, the others only hand it their containers.
  thread_local std::vector<Value>* unwinding = nullptr;
  if (unwinding != nullptr) {
    unwinding->push_back(std::move(*this));
    return;
  }
  std::vector<Value> stack;
  unwinding = &stack;
  stack.push_back(std::move(*this));
  while (!stack.empty()) {
    Value last = std::move(stack.back());
    stack.pop_back();
    if (last.is_list()) {
      for (Value& item : last.list()) {
        if (HoldsLastContainer(item)) stack.push_back(std::move(item));
      }
    } else {
      for (auto& [key, item] : last.dict()) {
        if (HoldsLastContainer(item)) stack.push_back(std::move(item));
      }
    }
    last.data = None{};  // Frees the container: its items hold none now.
  }
  unwinding = nullptr;
}

namespace {

// Both JSON flavours: nlohmann::json sorts object keys, ordered_json keeps
// them as written (what Python's dicts, and so jinja2's tojson, print).
template <typename Json>
Value FromAnyJson(const Json& json) {
  if (json.is_null()) return Value(None{});
  if (json.is_boolean()) return Value(json.template get<bool>());
  if (json.is_number_integer()) return Value(json.template get<int64_t>());
  if (json.is_number()) return Value(json.template get<double>());
  if (json.is_string()) return Value(json.template get<std::string>());
  if (json.is_array()) {
    List list;
    for (const auto& item : json) list.push_back(FromAnyJson(item));
    return Value(std::move(list));
  }
  Dict dict;
  for (const auto& [key, item] : json.items()) dict.emplace_back(key, FromAnyJson(item));
  return Value(std::move(dict));
}

}  // namespace

Value FromJson(const nlohmann::json& json) { return FromAnyJson(json); }

Value FromJson(const nlohmann::ordered_json& json) { return FromAnyJson(json); }

}  // namespace pagoda::text::jinja
