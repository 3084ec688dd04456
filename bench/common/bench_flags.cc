#include "bench/common/bench_flags.h"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/flag_checks.h"

namespace pagoda::bench {

namespace {

[[noreturn]] void Fail(const char* program, absl::string_view message) {
  std::fprintf(stderr, "%s: %.*s\n", program, static_cast<int>(message.size()), message.data());
  std::exit(1);
}

std::string Dashed(absl::string_view name) { return absl::StrReplaceAll(name, {{"_", "-"}}); }

}  // namespace

bool AbslParseFlag(absl::string_view text, PositiveIntList* list, std::string* error) {
  std::optional<std::vector<int>> values =
      ParsePositiveIntList(std::string_view(text.data(), text.size()));
  if (!values) {
    *error = "expected a comma-separated list of positive integers";
    return false;
  }
  list->values = *std::move(values);
  return true;
}

std::string AbslUnparseFlag(const PositiveIntList& list) { return absl::StrJoin(list.values, ","); }

void ParseBenchCommandLine(int argc, char** argv, const ProgramInfo& program,
                           std::initializer_list<const char*> positional_flags) {
  ProgramInfo with_arguments = program;
  with_arguments.takes_arguments = true;  // Refused below past positional_flags.
  const std::vector<char*> positionals = ParsePagodaCommandLine(argc, argv, with_arguments);
  const char* const* name = positional_flags.begin();
  for (size_t i = 1; i < positionals.size(); ++i, ++name) {
    if (name == positional_flags.end()) {
      Fail(program.name, absl::StrCat("unexpected argument '", positionals[i], "'"));
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(*name);
    if (flag == nullptr) Fail(program.name, absl::StrCat("no flag --", Dashed(*name)));
    std::string error;
    if (!flag->ParseFrom(positionals[i], &error)) {
      Fail(program.name, absl::StrCat("argument ", i, " (--", Dashed(*name), "): ", error));
    }
  }
}

absl::Status Required(absl::string_view flag, const std::string& value) {
  if (!value.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " is required"));
}

absl::Status OneOf(absl::string_view flag, const std::string& value,
                   std::initializer_list<absl::string_view> allowed) {
  for (absl::string_view name : allowed) {
    if (value == name) return absl::OkStatus();
  }
  std::vector<absl::string_view> names(allowed);
  const std::string last(names.back());
  names.pop_back();
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", value, " is not ",
                                                 absl::StrJoin(names, ", "),
                                                 names.empty() ? "" : " or ", last));
}

absl::Status Threads(int threads) { return flag_check::Range("threads", threads, 1, 1024); }

void CheckFlags(const char* program, std::initializer_list<absl::Status> checks) {
  const absl::Status status = flag_check::FirstError(checks);
  if (!status.ok()) Fail(program, status.message());
}

}  // namespace pagoda::bench
