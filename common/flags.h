#ifndef PAGODA_COMMON_FLAGS_H_
#define PAGODA_COMMON_FLAGS_H_

// The command line of every Pagoda binary: vLLM's dashed names and --no-NAME
// negation over Abseil flags, --help by group, --version. Binaries read their
// flags in one file each (server_flags.cc, worker_flags.cc), never here.

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagoda {

// Lets command lines use vLLM's dashed flag names (--max-num-seqs) for
// Abseil flags, whose names cannot hold '-' (max_num_seqs). Rewrites, in
// place, the name part of each "-name[=value]" / "--name[=value]" argument
// whose underscored spelling is a registered flag, and vLLM's negation of a
// bool flag, "--no-name", to Abseil's "--noname"; anything else (values,
// positional arguments, unknown names) is left as it is. Stops at "--".
// Call before absl::ParseCommandLine.
void AcceptDashedFlagNames(int argc, char** argv);

// A heading of --help and the flags (underscored names) under it.
struct FlagGroup {
  std::string title;
  std::vector<std::string> flags;
};

// What a binary says about itself for --help and --version.
struct ProgramInfo {
  const char* name;   // "pagoda-server"
  const char* usage;  // One line: "pagoda-server --model DIR [flags]: ..."
  // --help's groups, in order; flags in none are listed last, by name. Empty:
  // one list by name.
  std::vector<FlagGroup> groups = {};
  // Flags whose value is a JSON object, which also take vLLM's key-by-key
  // spelling (--NAME.KEY VALUE, common/json_flag_keys.h); underscored names.
  std::vector<std::string> json_flags = {};
  // vLLM's short spellings: {"tp", "tensor_parallel_size"} takes "-tp 2"
  // and "-tp=2" for --tensor-parallel-size.
  std::vector<std::pair<std::string, std::string>> aliases = {};
  // Flags that take several words, as vLLM's nargs="+" options do
  // (--lora-modules a=/x b=/y): the words after "--NAME" up to the next
  // argument starting with "-" become one space-separated value.
  std::vector<std::string> list_flags = {};
  // Whether the program reads positional arguments; without, one is refused
  // (a word meant for a flag would otherwise be dropped unseen).
  bool takes_arguments = false;
  // Whether "--config FILE.yaml" is read in (vLLM's, common/config_file.h);
  // the program then defines the string flag "config", which keeps its path.
  bool reads_config_file = false;
  // Integer flags whose value may be spelled as vLLM's human_readable_int
  // reads it ("32k" = 32000, common/human_readable_int.h).
  std::vector<std::string> human_readable_int_flags = {};
};

// The arguments with each "--NAME w1 w2 ..." of `list_flags` (before any
// "--") joined into "--NAME=w1 w2 ..."; the rest untouched.
std::vector<std::string> JoinListFlagWords(std::vector<std::string> args,
                                           const std::vector<std::string>& list_flags);

// The arguments with the value of each "--NAME VALUE" or "--NAME=VALUE" of
// `flags` (before any "--") that is a human-readable integer ("32k")
// spelled as that integer; the rest untouched.
std::vector<std::string> ExpandHumanReadableInts(std::vector<std::string> args,
                                                 const std::vector<std::string>& flags);

// The arguments with each "-ALIAS[=value]" of `aliases` (before any "--")
// spelled "--NAME[=value]"; the rest untouched.
std::vector<std::string> ExpandFlagAliases(
    std::vector<std::string> args, const std::vector<std::pair<std::string, std::string>>& aliases);

// "NAME VERSION (BUILD_TYPE build)", from the values CMake compiled in.
std::string VersionLine(const char* program_name);

// The --help text: the usage line, then every flag the program defined
// (Abseil's own flags left out) by its dashed name, with help and default.
std::string HelpText(const ProgramInfo& program);

// The command-line entry point of every Pagoda executable: handles --help,
// -h and --version (prints to stdout and exits 0), reads a --config file in
// and gathers the JSON flags' keys (a bad one: one line on stderr, exit 1),
// accepts dashed names, then parses with Abseil (which exits 1 on an
// unknown flag); a positional argument to a program that takes none: one
// line, exit 1. Returns the positional arguments, argv[0] first (they live
// as long as the program).
std::vector<char*> ParsePagodaCommandLine(int argc, char** argv, const ProgramInfo& program);

// A comma-separated list of positive integers ("1,8,32", the benchmarks'
// batch and concurrency lists); nullopt when it is empty or any entry is
// empty, not a number, or not positive.
std::optional<std::vector<int>> ParsePositiveIntList(std::string_view text);

}  // namespace pagoda

#endif  // PAGODA_COMMON_FLAGS_H_
