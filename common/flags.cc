#include "common/flags.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/config_file.h"
#include "common/human_readable_int.h"
#include "common/json_flag_keys.h"

#ifndef PAGODA_VERSION
#define PAGODA_VERSION "unknown"
#endif
#ifndef PAGODA_BUILD_TYPE
#define PAGODA_BUILD_TYPE "unknown"
#endif

namespace pagoda {

namespace {

// "--no-name" (vLLM's negation) of a registered bool flag "name": rewrites
// the argument to Abseil's "--noname" in place (it only gets shorter).
bool RewriteDashedNegation(char* arg, size_t name_begin, absl::string_view name) {
  if (name.rfind("no_", 0) != 0) return false;
  const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name.substr(3));
  if (flag == nullptr || !flag->IsOfType<bool>()) return false;
  std::string rewritten = absl::StrCat("no", name.substr(3));
  absl::string_view rest(arg + name_begin + name.size());
  rewritten.append(rest.data(), rest.size());
  std::memcpy(arg + name_begin, rewritten.c_str(), rewritten.size() + 1);
  return true;
}

}  // namespace

void AcceptDashedFlagNames(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    const size_t name_begin = arg[1] == '-' ? 2 : 1;
    const size_t name_end = std::min(arg.find('='), arg.size());
    if (name_end <= name_begin) continue;
    std::string name(arg.substr(name_begin, name_end - name_begin));
    for (char& c : name) {
      if (c == '-') c = '_';
    }
    if (absl::FindCommandLineFlag(name) == nullptr) {
      if (RewriteDashedNegation(argv[i], name_begin, name)) continue;
      // Abseil's negation, "--noname", with a dashed name; else unknown.
      if (name.rfind("no", 0) != 0 || absl::FindCommandLineFlag(name.substr(2)) == nullptr) {
        continue;
      }
    }
    for (size_t j = name_begin; j < name_end; ++j) {
      if (argv[i][j] == '-') argv[i][j] = '_';
    }
  }
}

std::string VersionLine(const char* program_name) {
  return absl::StrCat(program_name, " ", PAGODA_VERSION, " (", PAGODA_BUILD_TYPE, " build)");
}

namespace {

void AppendFlagLine(const absl::CommandLineFlag& flag, const ProgramInfo& program,
                    std::string* text) {
  std::string short_forms;
  for (const auto& [alias, name] : program.aliases) {
    if (name == flag.Name()) absl::StrAppend(&short_forms, " Short: -", alias, ".");
  }
  absl::StrAppend(text, "  --", absl::StrReplaceAll(flag.Name(), {{"_", "-"}}), "  ", flag.Help(),
                  short_forms, " (default: ", flag.DefaultValue(), ")\n");
}

}  // namespace

std::string HelpText(const ProgramInfo& program) {
  std::map<std::string, const absl::CommandLineFlag*> flags;  // By name.
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    // Abseil registers its own (--flagfile, --helpfull, ...) from its sources.
    if (absl::StrContains(flag->Filename(), "absl/")) continue;
    flags.emplace(std::string(name), flag);
  }
  std::string text = absl::StrCat("usage: ", program.usage, "\n");
  for (const FlagGroup& group : program.groups) {
    absl::StrAppend(&text, "\n", group.title, ":\n");
    for (const std::string& name : group.flags) {
      auto it = flags.find(name);
      if (it == flags.end()) continue;
      AppendFlagLine(*it->second, program, &text);
      flags.erase(it);
    }
  }
  if (program.groups.empty() || !flags.empty()) {
    absl::StrAppend(&text, program.groups.empty() ? "\nflags:\n" : "\nOther flags:\n");
  }
  for (const auto& [name, flag] : flags) AppendFlagLine(*flag, program, &text);
  if (!program.groups.empty()) absl::StrAppend(&text, "\nThis program:\n");
  absl::StrAppend(&text, "  -h, --help  Show this help and exit.\n",
                  "  --version  Show the version and exit.\n");
  return text;
}

std::vector<std::string> ExpandFlagAliases(
    std::vector<std::string> args,
    const std::vector<std::pair<std::string, std::string>>& aliases) {
  for (size_t i = 1; i < args.size() && args[i] != "--"; ++i) {
    for (const auto& [alias, name] : aliases) {
      const std::string short_form = absl::StrCat("-", alias);
      if (args[i] == short_form || absl::StartsWith(args[i], absl::StrCat(short_form, "="))) {
        args[i] = absl::StrCat("--", name, args[i].substr(short_form.size()));
        break;
      }
    }
  }
  return args;
}

std::vector<std::string> ExpandHumanReadableInts(std::vector<std::string> args,
                                                 const std::vector<std::string>& flags) {
  const auto expand = [](std::string& value) {
    if (std::optional<int64_t> integer = HumanReadableInteger(value)) {
      value = absl::StrCat(*integer);
    }
  };
  for (size_t i = 1; i < args.size() && args[i] != "--"; ++i) {
    if (args[i].size() < 2 || args[i][0] != '-') continue;
    const size_t begin = args[i][1] == '-' ? 2 : 1;
    const size_t equals = args[i].find('=');
    const std::string name = absl::StrReplaceAll(
        args[i].substr(begin, equals == std::string::npos ? std::string::npos : equals - begin),
        {{"-", "_"}});
    if (std::find(flags.begin(), flags.end(), name) == flags.end()) continue;
    if (equals != std::string::npos) {
      std::string value = args[i].substr(equals + 1);
      expand(value);
      args[i] = absl::StrCat(args[i].substr(0, equals + 1), value);
    } else if (i + 1 < args.size()) {
      expand(args[++i]);
    }
  }
  return args;
}

std::vector<std::string> JoinListFlagWords(std::vector<std::string> args,
                                           const std::vector<std::string>& list_flags) {
  std::vector<std::string> joined;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") {
      joined.insert(joined.end(), args.begin() + static_cast<ptrdiff_t>(i), args.end());
      break;
    }
    joined.push_back(args[i]);
    if (i == 0 || args[i].size() < 2 || args[i][0] != '-') continue;
    // "--name" or "-name", dashes or underscores, with no "=value".
    const size_t begin = args[i][1] == '-' ? 2 : 1;
    const std::string name = absl::StrReplaceAll(args[i].substr(begin), {{"-", "_"}});
    if (std::find(list_flags.begin(), list_flags.end(), name) == list_flags.end()) continue;
    std::vector<std::string> words;
    while (i + 1 < args.size() && !absl::StartsWith(args[i + 1], "-")) words.push_back(args[++i]);
    if (!words.empty()) joined.back() = absl::StrCat("--", name, "=", absl::StrJoin(words, " "));
  }
  return joined;
}

namespace {

// The arguments as Abseil will parse them: a --config file read in, vLLM's
// short spellings spelled out, human-readable integers as integers, list
// flags' words joined, JSON flags' keys gathered.
absl::StatusOr<GatheredJsonFlags> GatherCommandLine(int argc, char** argv,
                                                    const ProgramInfo& program) {
  absl::StatusOr<std::vector<std::string>> args = std::vector<std::string>(argv, argv + argc);
  if (program.reads_config_file) args = PullConfigFileArguments(*std::move(args));
  if (!args.ok()) return args.status();
  std::vector<std::string> expanded = ExpandHumanReadableInts(
      ExpandFlagAliases(*std::move(args), program.aliases), program.human_readable_int_flags);
  return GatherJsonFlagKeys(JoinListFlagWords(std::move(expanded), program.list_flags),
                            program.json_flags);
}

}  // namespace

std::vector<char*> ParsePagodaCommandLine(int argc, char** argv, const ProgramInfo& program) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg == "-h" || arg == "--help" || arg == "-help") {
      std::cout << HelpText(program);
      std::exit(0);
    }
    if (arg == "--version" || arg == "-version") {
      std::cout << VersionLine(program.name) << std::endl;
      std::exit(0);
    }
  }
  absl::SetProgramUsageMessage(program.usage);
  absl::StatusOr<GatheredJsonFlags> gathered = GatherCommandLine(argc, argv, program);
  if (!gathered.ok()) {
    std::cerr << program.name << ": " << gathered.status().message() << std::endl;
    std::exit(1);
  }
  for (const std::string& key : gathered->repeated_keys) {
    std::cerr << program.name << ": warning: " << key << " given more than once; the last counts"
              << std::endl;
  }
  // Abseil's positional results point into these strings: kept for the
  // program's life (a deque never moves its elements).
  static auto* const kCommandLines = new std::deque<std::vector<std::string>>();
  std::vector<std::string>& kept = kCommandLines->emplace_back(std::move(gathered->args));
  std::vector<char*> pointers;
  for (std::string& arg : kept) pointers.push_back(arg.data());
  AcceptDashedFlagNames(static_cast<int>(pointers.size()), pointers.data());
  std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(pointers.size()), pointers.data());
  if (!program.takes_arguments && positional.size() > 1) {
    std::cerr << program.name << ": unexpected argument '" << positional[1]
              << "' (this program takes flags only: --NAME VALUE)" << std::endl;
    std::exit(1);
  }
  return positional;
}

std::optional<std::vector<int>> ParsePositiveIntList(std::string_view text) {
  std::vector<int> values;
  for (absl::string_view part : absl::StrSplit(absl::string_view(text.data(), text.size()), ',')) {
    int value = 0;
    if (!absl::SimpleAtoi(part, &value) || value <= 0) return std::nullopt;
    values.push_back(value);
  }
  return values;
}

}  // namespace pagoda
