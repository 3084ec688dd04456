#include "text/jinja_value.h"

#include <cmath>
#include <cstdio>

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

std::string PythonRepr(const Value& value) {
  if (value.is_string()) {
    std::string out = "'";
    for (char c : value.str()) {
      if (c == '\'' || c == '\\') out += '\\';
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out += c;
    }
    return out + "'";
  }
  return ToText(value);
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

void JsonValue(const Value& value, int indent, int depth, std::string* out) {
  const std::string newline =
      indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent) * (depth + 1), ' ') : "";
  const std::string closing =
      indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent) * depth, ' ') : "";
  const std::string item_separator = indent >= 0 ? "," : ", ";
  if (value.is_undefined() || value.is_none()) {
    *out += "null";
  } else if (value.is_bool()) {
    *out += std::get<bool>(value.data) ? "true" : "false";
  } else if (value.is_int()) {
    *out += absl::StrCat(value.integer());
  } else if (value.is_number()) {
    *out += PythonFloat(value.number());
  } else if (value.is_string()) {
    JsonString(value.str(), out);
  } else if (value.is_list()) {
    if (value.list().empty()) {
      *out += "[]";
      return;
    }
    *out += "[";
    for (size_t i = 0; i < value.list().size(); ++i) {
      if (i > 0) *out += item_separator;
      *out += newline;
      JsonValue(value.list()[i], indent, depth + 1, out);
    }
    *out += closing + "]";
  } else {
    if (value.dict().empty()) {
      *out += "{}";
      return;
    }
    *out += "{";
    for (size_t i = 0; i < value.dict().size(); ++i) {
      if (i > 0) *out += item_separator;
      *out += newline;
      JsonString(value.dict()[i].first, out);
      *out += ": ";
      JsonValue(value.dict()[i].second, indent, depth + 1, out);
    }
    *out += closing + "}";
  }
}

}  // namespace

std::string ToText(const Value& value) {
  if (value.is_undefined()) return "";
  if (value.is_none()) return "None";
  if (value.is_bool()) return std::get<bool>(value.data) ? "True" : "False";
  if (value.is_int()) return absl::StrCat(value.integer());
  if (value.is_number()) return PythonFloat(value.number());
  if (value.is_string()) return value.str();
  if (value.is_list()) {
    std::string out = "[";
    for (size_t i = 0; i < value.list().size(); ++i) {
      if (i > 0) out += ", ";
      out += PythonRepr(value.list()[i]);
    }
    return out + "]";
  }
  std::string out = "{";
  for (size_t i = 0; i < value.dict().size(); ++i) {
    if (i > 0) out += ", ";
    out += PythonRepr(Value(value.dict()[i].first)) + ": " + PythonRepr(value.dict()[i].second);
  }
  return out + "}";
}

std::string ToJson(const Value& value, int indent) {
  std::string out;
  JsonValue(value, indent, 0, &out);
  return out;
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.number() == b.number();
  if (a.is_bool() && b.is_bool()) return std::get<bool>(a.data) == std::get<bool>(b.data);
  if (a.is_string() && b.is_string()) return a.str() == b.str();
  if ((a.is_none() && b.is_none()) || (a.is_undefined() && b.is_undefined())) return true;
  if (a.is_list() && b.is_list()) {
    if (a.list().size() != b.list().size()) return false;
    for (size_t i = 0; i < a.list().size(); ++i) {
      if (!Equal(a.list()[i], b.list()[i])) return false;
    }
    return true;
  }
  if (a.is_dict() && b.is_dict()) {
    if (a.dict().size() != b.dict().size()) return false;
    for (const auto& [key, value] : a.dict()) {
      if (!Equal(value, b.get(key))) return false;
    }
    return true;
  }
  return false;
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
