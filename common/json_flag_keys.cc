#include "common/json_flag_keys.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/human_readable_int.h"
#include "nlohmann/json.hpp"

namespace pagoda {

namespace {

using Json = nlohmann::json;

// "--name.key.key2[+]", "-name.key" or "--name.key=value", where name is a
// flag-like word: the parts. Anything else (a value such as "-0.5", a flag
// with no key) is not a key argument.
struct KeyArgument {
  std::string flag;                         // Underscored.
  std::vector<std::string> keys;            // Non-empty.
  bool append = false;                      // "KEY+": strings appended to a list.
  std::optional<std::string> inline_value;  // "=value"; else the next argument.
};

std::optional<KeyArgument> ParseKeyArgument(absl::string_view arg) {
  if (arg.size() < 2 || arg[0] != '-') return std::nullopt;
  const size_t begin = arg[1] == '-' ? 2 : 1;
  const size_t equals = arg.find('=');
  const absl::string_view name =
      arg.substr(begin, (equals == absl::string_view::npos ? arg.size() : equals) - begin);
  const size_t dot = name.find('.');
  if (dot == absl::string_view::npos || dot == 0 || !absl::ascii_isalpha(name[0])) {
    return std::nullopt;
  }
  const absl::string_view flag = name.substr(0, dot);
  if (!std::all_of(flag.begin(), flag.end(),
                   [](char c) { return absl::ascii_isalnum(c) || c == '-' || c == '_'; })) {
    return std::nullopt;
  }
  KeyArgument key;
  key.flag = absl::StrReplaceAll(flag, {{"-", "_"}});
  absl::string_view path = name.substr(dot + 1);
  if (!path.empty() && path.back() == '+') {
    key.append = true;
    path.remove_suffix(1);
  }
  key.keys = absl::StrSplit(path, '.');
  if (equals != absl::string_view::npos) key.inline_value = std::string(arg.substr(equals + 1));
  return key;
}

// vLLM's reading of one key's value text: JSON, else a human-readable
// integer, else the text. "KEY+": the comma-separated strings, as a list.
Json ValueOf(const std::string& text, bool append) {
  if (append) {
    Json list = Json::array();
    for (absl::string_view item : absl::StrSplit(text, ',')) list.push_back(std::string(item));
    return list;
  }
  Json parsed = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_discarded()) return parsed;
  if (std::optional<int64_t> integer = HumanReadableInteger(text)) return *integer;
  return text;
}

// vLLM's recursive_dict_update: objects merge, lists concatenate, anything
// else replaces; the dotted paths of replaced keys go to `repeated`.
void Merge(Json& into, const Json& update, const std::string& prefix,
           std::vector<std::string>& repeated) {
  for (const auto& [key, value] : update.items()) {
    const std::string path = absl::StrCat(prefix, ".", key);
    auto existing = into.find(key);
    if (existing != into.end() && existing->is_object() && value.is_object()) {
      Merge(*existing, value, path, repeated);
    } else if (existing != into.end() && existing->is_array() && value.is_array()) {
      existing->insert(existing->end(), value.begin(), value.end());
    } else {
      if (existing != into.end()) repeated.push_back(path);
      into[key] = value;
    }
  }
}

// "--speculative-config" for "speculative_config".
std::string Dashed(const std::string& flag) {
  return absl::StrCat("--", absl::StrReplaceAll(flag, {{"_", "-"}}));
}

// The underscored name of a whole "--name[=value]" argument, or "".
std::string WholeFlagName(absl::string_view arg) {
  if (arg.size() < 2 || arg[0] != '-') return "";
  const size_t begin = arg[1] == '-' ? 2 : 1;
  const size_t end = std::min(arg.find('='), arg.size());
  return absl::StrReplaceAll(arg.substr(begin, end - begin), {{"-", "_"}});
}

bool IsJsonFlag(const std::string& flag, absl::Span<const std::string> json_flags) {
  return std::find(json_flags.begin(), json_flags.end(), flag) != json_flags.end();
}

// A key argument's flag takes keys, and none of its keys is empty.
absl::Status CheckKeyArgument(const KeyArgument& key, const std::string& name,
                              absl::Span<const std::string> json_flags) {
  if (!IsJsonFlag(key.flag, json_flags)) {
    std::vector<std::string> dashed;
    for (const std::string& flag : json_flags) dashed.push_back(Dashed(flag));
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ", Dashed(key.flag), " takes no keys (",
                     dashed.empty() ? "no flag here does"
                                    : absl::StrCat("only ", absl::StrJoin(dashed, ", "), " do"),
                     ")"));
  }
  if (std::any_of(key.keys.begin(), key.keys.end(),
                  [](const std::string& part) { return part.empty(); })) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": an empty key"));
  }
  return absl::OkStatus();
}

// {"a": {"b": value}} for --NAME.a.b value.
Json NestedValue(const KeyArgument& key) {
  Json value = ValueOf(*key.inline_value, key.append);
  for (auto part = key.keys.rbegin(); part != key.keys.rend(); ++part) {
    value = Json{{*part, std::move(value)}};
  }
  return value;
}

}  // namespace

absl::StatusOr<GatheredJsonFlags> GatherJsonFlagKeys(std::vector<std::string> args,
                                                     absl::Span<const std::string> json_flags) {
  GatheredJsonFlags gathered;
  std::map<std::string, Json> objects;        // By flag.
  std::map<std::string, size_t> first_index;  // By flag: where its JSON goes.
  std::vector<std::string> whole;             // Flags also given whole.
  bool after_terminator = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") after_terminator = true;
    std::optional<KeyArgument> key =
        after_terminator || i == 0 ? std::nullopt : ParseKeyArgument(arg);
    if (!key.has_value()) {
      if (!after_terminator && i > 0 && IsJsonFlag(WholeFlagName(arg), json_flags)) {
        whole.push_back(WholeFlagName(arg));
      }
      gathered.args.push_back(arg);
      continue;
    }
    const std::string name = absl::StrCat(Dashed(key->flag), ".", absl::StrJoin(key->keys, "."));
    if (absl::Status fits = CheckKeyArgument(*key, name, json_flags); !fits.ok()) return fits;
    if (!key->inline_value.has_value()) {
      if (i + 1 == args.size()) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": no value after it"));
      }
      key->inline_value = args[++i];
    }
    if (first_index.emplace(key->flag, gathered.args.size()).second) {
      gathered.args.emplace_back();  // Filled once every key is in.
    }
    Merge(objects[key->flag], NestedValue(*key), Dashed(key->flag), gathered.repeated_keys);
  }
  for (const auto& [flag, index] : first_index) {
    if (std::find(whole.begin(), whole.end(), flag) != whole.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Dashed(flag), " given both as one JSON object and key by key (",
                       Dashed(flag), ".KEY): give one form"));
    }
    gathered.args[index] = absl::StrCat(Dashed(flag), "=", objects[flag].dump());
  }
  return gathered;
}

}  // namespace pagoda
