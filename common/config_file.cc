#include "common/config_file.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "common/yaml_json.h"

namespace pagoda {
namespace {

using ConfigValue = nlohmann::ordered_json;

absl::Status ConfigRefused(const std::string& path, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("--config ", path, ": ", why));
}

bool IsBoolFlag(const std::string& key) {
  const absl::CommandLineFlag* flag =
      absl::FindCommandLineFlag(absl::StrReplaceAll(key, {{"-", "_"}}));
  return flag != nullptr && flag->IsOfType<bool>();
}

// A value as Python's str() writes it (a nested collection: its JSON).
std::string Word(const ConfigValue& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_boolean()) return value.get<bool>() ? "True" : "False";
  // Replace, not throw, on bytes that are not UTF-8 (libyaml should let none by).
  return value.dump(-1, ' ', false, ConfigValue::error_handler_t::replace);
}

// The words of one key; `key` names it in errors.
absl::Status AppendWords(const std::string& key, const ConfigValue& value, const std::string& path,
                         std::vector<std::string>& words) {
  const std::string flag = absl::StrCat("--", key);
  const auto null_refused = [&] {
    return ConfigRefused(path,
                         absl::StrCat("key \"", key, "\": null: give a value or leave it out"));
  };
  if (key == "config") {
    return ConfigRefused(path, "a config file cannot name another (key \"config\")");
  }
  if (value.is_null()) return null_refused();
  if (value.is_boolean()) {
    if (value.get<bool>()) {
      words.push_back(flag);
    } else if (IsBoolFlag(key)) {
      words.push_back(absl::StrCat(flag, "=false"));
    }
    return absl::OkStatus();
  }
  if (value.is_array()) {
    if (value.empty()) return absl::OkStatus();
    words.push_back(flag);
    for (const ConfigValue& item : value) {
      if (item.is_null()) return null_refused();
      words.push_back(Word(item));
    }
    return absl::OkStatus();
  }
  words.push_back(flag);
  words.push_back(Word(value));
  return absl::OkStatus();
}

absl::StatusOr<ConfigValue> ReadConfigFile(const std::string& path) {
  const std::string extension = std::filesystem::path(path).extension().string();
  if (extension != ".yaml" && extension != ".yml") {
    return ConfigRefused(path, "must be a .yaml or .yml file, as vLLM's");
  }
  std::error_code error;
  const std::uintmax_t size = std::filesystem::file_size(path, error);
  if (error) return ConfigRefused(path, absl::StrCat("cannot be read: ", error.message()));
  if (size > kMaxConfigFileBytes) {
    return ConfigRefused(path, absl::StrCat("is ", size, " bytes; at most ", kMaxConfigFileBytes));
  }
  std::ifstream in(path, std::ios::binary);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (!in.good() && !in.eof()) return ConfigRefused(path, "cannot be read");
  absl::StatusOr<ConfigValue> config = ParseYamlDocument(text);
  if (!config.ok()) return ConfigRefused(path, config.status().message());
  return config;
}

// Where "--config" is among `args` (before any "--"), and its file.
struct ConfigArgument {
  size_t index = 0;
  size_t words = 1;  // 2 for "--config FILE".
  std::string path;
};

absl::StatusOr<std::optional<ConfigArgument>> FindConfigArgument(
    const std::vector<std::string>& args) {
  std::optional<ConfigArgument> found;
  for (size_t i = 1; i < args.size() && args[i] != "--"; ++i) {
    // Abseil also takes one dash: "-config" must not slip past unread.
    const absl::string_view arg = absl::StripPrefix(absl::StripPrefix(args[i], "-"), "-");
    if (arg.size() == args[i].size()) continue;
    const bool spaced = arg == "config";
    if (!spaced && !absl::StartsWith(arg, "config=")) continue;
    if (found) return absl::InvalidArgumentError("--config given more than once, as vLLM refuses");
    if (spaced && i + 1 == args.size()) return absl::InvalidArgumentError("--config needs a file");
    found = spaced ? ConfigArgument{i, 2, args[i + 1]}
                   : ConfigArgument{i, 1, std::string(arg.substr(sizeof("config=") - 1))};
  }
  return found;
}

// Without the file's "--model X".
void DropModelWords(std::vector<std::string>& words) {
  for (size_t i = 0; i + 1 < words.size(); ++i) {
    if (words[i] == "--model") {
      words.erase(words.begin() + static_cast<ptrdiff_t>(i),
                  words.begin() + static_cast<ptrdiff_t>(i) + 2);
      return;
    }
  }
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ConfigFileWords(const ConfigValue& config,
                                                         const std::string& path) {
  if (!config.is_object()) {
    return ConfigRefused(path, "must hold a mapping of flag names to values (\"port: 8000\")");
  }
  std::vector<std::string> words;
  for (const auto& [key, value] : config.items()) {
    if (absl::Status status = AppendWords(key, value, path, words); !status.ok()) return status;
  }
  return words;
}

absl::StatusOr<std::vector<std::string>> PullConfigFileArguments(std::vector<std::string> args) {
  absl::StatusOr<std::optional<ConfigArgument>> found = FindConfigArgument(args);
  if (!found.ok()) return found.status();
  if (!found->has_value()) return args;
  const ConfigArgument config = **found;
  absl::StatusOr<ConfigValue> parsed = ReadConfigFile(config.path);
  if (!parsed.ok()) return parsed.status();
  absl::StatusOr<std::vector<std::string>> words = ConfigFileWords(*parsed, config.path);
  if (!words.ok()) return words.status();
  args[config.index] = absl::StrCat("--config=", config.path);
  if (config.words == 2) args.erase(args.begin() + static_cast<ptrdiff_t>(config.index) + 1);
  // After the program's name and a leading positional argument (vLLM's
  // model): a list flag's words must not run on into it. That argument is
  // the model, as vLLM's `serve MODEL` wins over the file's "model".
  const size_t at = args.size() > 1 && !absl::StartsWith(args[1], "-") ? 2 : 1;
  if (at == 2) DropModelWords(*words);
  args.insert(args.begin() + static_cast<ptrdiff_t>(std::min(at, args.size())), words->begin(),
              words->end());
  return args;
}

}  // namespace pagoda
