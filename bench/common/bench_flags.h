#ifndef PAGODA_BENCH_COMMON_BENCH_FLAGS_H_
#define PAGODA_BENCH_COMMON_BENCH_FLAGS_H_

// The benchmarks' command lines: Abseil flags defined in each program's own
// file, parsed as every Pagoda binary's are (common/flags.h: --help,
// --version, dashed names, an unknown flag an error), plus what only the
// benchmarks need: the positional form their recorded runs use
// (`bench_cpu_linear 2 bf16 hot`), list-valued flags and one-line refusals.

#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/flags.h"

namespace pagoda::bench {

// A flag's type for a comma-separated list of positive integers ("--batches
// 1,8,32"): Abseil refuses any other text (common/flags.h's
// ParsePositiveIntList) when it parses the command line. As a default:
// (PositiveIntList{{1, 8, 32}}), in parentheses for the macro's sake.
struct PositiveIntList {
  std::vector<int> values;
};
bool AbslParseFlag(absl::string_view text, PositiveIntList* list, std::string* error);
std::string AbslUnparseFlag(const PositiveIntList& list);

// Parses the command line with ParsePagodaCommandLine, then sets the flags
// named (underscored) in `positional_flags` from the positional arguments,
// in order, as --NAME=VALUE would: a position overrides the same flag given
// by name. A value the flag's type refuses, or more positional arguments
// than names, prints one line and exits 1.
void ParseBenchCommandLine(int argc, char** argv, const ProgramInfo& program,
                           std::initializer_list<const char*> positional_flags = {});

// "--NAME is required" unless `value` is set.
absl::Status Required(absl::string_view flag, const std::string& value);

// "--NAME VALUE is not A, B or C" unless `value` is one of `allowed`.
absl::Status OneOf(absl::string_view flag, const std::string& value,
                   std::initializer_list<absl::string_view> allowed);

// --threads: the CPU backend's threads, 1 to 1024.
absl::Status Threads(int threads);

// On the first error of `checks` (common/flag_checks.h's refusals, Required),
// prints "PROGRAM: MESSAGE" and exits 1.
void CheckFlags(const char* program, std::initializer_list<absl::Status> checks);

}  // namespace pagoda::bench

#endif  // PAGODA_BENCH_COMMON_BENCH_FLAGS_H_
