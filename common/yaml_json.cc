#include "common/yaml_json.h"

#include <yaml.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace pagoda {
namespace {

using YamlValue = nlohmann::ordered_json;

constexpr int kMaxDepth = 64;
// Longer plain scalars are text, untyped: libstdc++'s std::regex recurses
// per character (one of 100,000 overflows the stack), and no flag value
// comes near this.
constexpr size_t kMaxTypedScalarBytes = 1024;
constexpr absl::string_view kTagPrefix = "tag:yaml.org,2002:";

absl::Status YamlRefused(size_t line, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", why));
}

// PyYAML's implicit resolvers (yaml/resolver.py), in the order it tries them.
bool LooksBool(const std::string& text) {
  static const std::regex kBool(
      "yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF");
  return std::regex_match(text, kBool);
}
bool LooksFloat(const std::string& text) {
  static const std::regex kFloat(R"([-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?)"
                                 R"(|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?)"
                                 R"(|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*)"
                                 R"(|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))");
  return std::regex_match(text, kFloat);
}
bool LooksInt(const std::string& text) {
  static const std::regex kInt(
      R"([-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)"
      R"(|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)");
  return std::regex_match(text, kInt);
}
bool LooksNull(const std::string& text) {
  return text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL";
}

// `digits` in `base`, all of them valid; nullopt past int64.
std::optional<int64_t> Digits(absl::string_view digits, int base) {
  if (digits.empty()) return std::nullopt;
  int64_t value = 0;
  const std::from_chars_result read =
      std::from_chars(digits.data(), digits.data() + digits.size(), value, base);
  if (read.ec != std::errc() || read.ptr != digits.data() + digits.size()) return std::nullopt;
  return value;
}

// "-", "+" or nothing off the front: the sign.
int TakeSign(std::string& text) {
  const int sign = absl::StartsWith(text, "-") ? -1 : 1;
  if (absl::StartsWith(text, "-") || absl::StartsWith(text, "+")) text.erase(0, 1);
  return sign;
}

// PyYAML's construct_yaml_int.
std::optional<int64_t> ConstructInt(std::string text) {
  absl::StrReplaceAll({{"_", ""}}, &text);
  const int sign = TakeSign(text);
  std::optional<int64_t> value;
  if (text == "0") {
    value = 0;
  } else if (absl::StartsWith(text, "0b")) {
    value = Digits(absl::string_view(text).substr(2), 2);
  } else if (absl::StartsWith(text, "0x")) {
    value = Digits(absl::string_view(text).substr(2), 16);
  } else if (absl::StartsWith(text, "0")) {
    value = Digits(text, 8);
  } else if (absl::StrContains(text, ':')) {  // Base 60: 1:30 = 90.
    int64_t total = 0;
    for (absl::string_view part : absl::StrSplit(text, ':')) {
      const std::optional<int64_t> digit = Digits(part, 10);
      if (!digit || __builtin_mul_overflow(total, int64_t{60}, &total) ||
          __builtin_add_overflow(total, *digit, &total)) {
        return std::nullopt;
      }
    }
    value = total;
  } else {
    value = Digits(text, 10);
  }
  if (!value) return std::nullopt;
  return sign * *value;
}

// PyYAML's construct_yaml_float.
std::optional<double> ConstructFloat(std::string text) {
  absl::StrReplaceAll({{"_", ""}}, &text);
  absl::AsciiStrToLower(&text);
  const int sign = TakeSign(text);
  if (text == ".inf") return sign * HUGE_VAL;
  if (text == ".nan") return std::nan("");
  double total = 0;
  for (absl::string_view part : absl::StrSplit(text, ':')) {  // Base 60 when ':'.
    double digit = 0;
    const std::from_chars_result read =
        std::from_chars(part.data(), part.data() + part.size(), digit);
    if (part.empty() || read.ec != std::errc() || read.ptr != part.data() + part.size()) {
      return std::nullopt;
    }
    total = total * 60 + digit;
  }
  return sign * total;
}

std::optional<bool> ConstructBool(const std::string& text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "yes" || lower == "true" || lower == "on") return true;
  if (lower == "no" || lower == "false" || lower == "off") return false;
  return std::nullopt;
}

// `type` ("int", "float", "bool", "null") of `text`, or why not.
absl::StatusOr<YamlValue> Construct(const std::string& type, const std::string& text, size_t line) {
  if (type == "null") return YamlValue(nullptr);
  if (type == "bool") {
    if (std::optional<bool> value = ConstructBool(text)) return YamlValue(*value);
  } else if (type == "int") {
    if (std::optional<int64_t> value = ConstructInt(text)) return YamlValue(*value);
  } else if (type == "float") {
    std::optional<double> value = ConstructFloat(text);
    if (value && !std::isfinite(*value)) {
      return YamlRefused(line, absl::StrCat("'", text, "': JSON has no infinity or NaN"));
    }
    if (value) return YamlValue(*value);
  }
  return YamlRefused(line, absl::StrCat("'", text, "' is not a YAML ", type,
                                        type == "int" ? " (or is beyond 64 bits)" : ""));
}

// A scalar as safe_load types it.
absl::StatusOr<YamlValue> Scalar(const yaml_event_t& event) {
  const auto& scalar = event.data.scalar;
  const std::string text(reinterpret_cast<const char*>(scalar.value), scalar.length);
  const size_t line = event.start_mark.line + 1;
  if (scalar.tag != nullptr) {
    const absl::string_view tag(reinterpret_cast<const char*>(scalar.tag));
    if (tag == "!" || tag == absl::StrCat(kTagPrefix, "str")) return YamlValue(text);
    for (const char* type : {"int", "float", "bool", "null"}) {
      if (tag == absl::StrCat(kTagPrefix, type)) return Construct(type, text, line);
    }
    return YamlRefused(line, absl::StrCat("tag ", tag,
                                          " is not read (only !!str, !!int, !!float, "
                                          "!!bool, !!null, !!map, !!seq)"));
  }
  if (scalar.style != YAML_PLAIN_SCALAR_STYLE || text.size() > kMaxTypedScalarBytes) {
    return YamlValue(text);  // Quoted, or too long to be typed: a string.
  }
  if (LooksBool(text)) return Construct("bool", text, line);
  if (LooksFloat(text)) return Construct("float", text, line);
  if (LooksInt(text)) return Construct("int", text, line);
  if (LooksNull(text)) return YamlValue(nullptr);
  return YamlValue(text);
}

// The collection tags safe_load takes: none, the non-specific "!", or `type`.
absl::Status CheckCollectionTag(const yaml_char_t* tag, const char* type, size_t line) {
  if (tag == nullptr) return absl::OkStatus();
  const absl::string_view name(reinterpret_cast<const char*>(tag));
  if (name == "!" || name == absl::StrCat(kTagPrefix, type)) return absl::OkStatus();
  return YamlRefused(line, absl::StrCat("tag ", name, " is not read here"));
}

// libyaml's events, one at a time, built into JSON by recursive descent.
class YamlReader {
 public:
  explicit YamlReader(std::string_view text) {
    yaml_parser_initialize(&parser_);
    yaml_parser_set_input_string(&parser_, reinterpret_cast<const unsigned char*>(text.data()),
                                 text.size());
  }
  ~YamlReader() {
    if (has_event_) yaml_event_delete(&event_);
    yaml_parser_delete(&parser_);
  }
  YamlReader(const YamlReader&) = delete;
  YamlReader& operator=(const YamlReader&) = delete;

  absl::StatusOr<YamlValue> Document() {
    absl::Status status = Next(YAML_STREAM_START_EVENT);
    if (status.ok()) status = Next();
    if (!status.ok()) return status;
    if (event_.type == YAML_STREAM_END_EVENT) return YamlValue(nullptr);  // No document.
    if (status = Next(); !status.ok()) return status;                     // Past DOCUMENT_START.
    absl::StatusOr<YamlValue> root = Node(0);
    if (!root.ok()) return root.status();
    if (status = Next(YAML_DOCUMENT_END_EVENT); !status.ok()) return status;
    if (status = Next(); !status.ok()) return status;
    if (event_.type != YAML_STREAM_END_EVENT) return YamlRefused(Line(), "a second document");
    return root;
  }

 private:
  size_t Line() const { return event_.start_mark.line + 1; }

  // The next event, which must be of `type` when one is given.
  absl::Status Next(std::optional<yaml_event_type_t> type = std::nullopt) {
    if (has_event_) yaml_event_delete(&event_);
    has_event_ = yaml_parser_parse(&parser_, &event_) != 0;
    if (!has_event_) {
      return YamlRefused(parser_.problem_mark.line + 1,
                         parser_.problem != nullptr ? parser_.problem : "not YAML");
    }
    if (type && event_.type != *type) return YamlRefused(Line(), "unexpected YAML structure");
    return absl::OkStatus();
  }

  // The node whose first event is the current one; ends on its last event.
  absl::StatusOr<YamlValue> Node(int depth) {
    if (depth > kMaxDepth) {
      return YamlRefused(Line(), absl::StrCat("nested deeper than ", kMaxDepth));
    }
    switch (event_.type) {
      case YAML_SCALAR_EVENT:
        return Scalar(event_);
      case YAML_SEQUENCE_START_EVENT:
        return Sequence(depth);
      case YAML_MAPPING_START_EVENT:
        return Mapping(depth);
      case YAML_ALIAS_EVENT:
        return YamlRefused(Line(), "aliases (*NAME) are not read: write the value out");
      default:
        return YamlRefused(Line(), "unexpected YAML structure");
    }
  }

  absl::StatusOr<YamlValue> Sequence(int depth) {
    absl::Status tag = CheckCollectionTag(event_.data.sequence_start.tag, "seq", Line());
    if (!tag.ok()) return tag;
    YamlValue items = YamlValue::array();
    for (;;) {
      if (absl::Status next = Next(); !next.ok()) return next;
      if (event_.type == YAML_SEQUENCE_END_EVENT) return items;
      absl::StatusOr<YamlValue> item = Node(depth + 1);
      if (!item.ok()) return item.status();
      items.push_back(*std::move(item));
    }
  }

  absl::StatusOr<YamlValue> Mapping(int depth) {
    absl::Status tag = CheckCollectionTag(event_.data.mapping_start.tag, "map", Line());
    if (!tag.ok()) return tag;
    YamlValue object = YamlValue::object();
    for (;;) {
      if (absl::Status next = Next(); !next.ok()) return next;
      if (event_.type == YAML_MAPPING_END_EVENT) return object;
      if (event_.type != YAML_SCALAR_EVENT) {
        return YamlRefused(Line(), "a key that is not a scalar");
      }
      const auto& key = event_.data.scalar;
      std::string name(reinterpret_cast<const char*>(key.value), key.length);
      if (absl::Status next = Next(); !next.ok()) return next;
      absl::StatusOr<YamlValue> value = Node(depth + 1);
      if (!value.ok()) return value.status();
      object[name] = *std::move(value);  // Again: its first place, the last value.
    }
  }

  yaml_parser_t parser_;
  yaml_event_t event_;
  bool has_event_ = false;
};

}  // namespace

absl::StatusOr<nlohmann::ordered_json> ParseYamlDocument(std::string_view text) {
  YamlReader reader(text);
  return reader.Document();
}

}  // namespace pagoda
