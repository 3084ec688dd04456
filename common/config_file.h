#ifndef PAGODA_COMMON_CONFIG_FILE_H_
#define PAGODA_COMMON_CONFIG_FILE_H_

// vLLM's --config FILE.yaml: a YAML mapping of flag names to values read as
// if given on the command line, before the command line's own flags (so
// these win). As vLLM's FlexibleArgumentParser (vllm/utils/argparse_utils.py)
// turns each key into words: true is "--KEY"; false is "--KEY=false" for a
// bool flag and nothing otherwise (vLLM adds "--no-KEY" only where that
// option exists); a list is "--KEY" and one word per item (none when empty);
// a mapping is "--KEY" and its JSON (a JSON flag: --speculative-config);
// anything else is "--KEY" and the value as Python's str() writes it. The
// file must end in .yaml or .yml. Differences, on purpose: null is refused
// (vLLM passes the word "None"), as is a "config" key (no second file); a
// mapping inside a list is its JSON (vLLM would write Python's repr); YAML
// aliases are refused (common/yaml_json.h).

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace pagoda {

// At most this many bytes: a flags file is a few hundred.
inline constexpr size_t kMaxConfigFileBytes = 1 << 20;

// `args` (argv[0] first) with the file of "--config FILE" or
// "--config=FILE" (or Abseil's one-dash "-config"; before any "--") read in: its words go after
// argv[0] and a leading positional argument (vLLM's model, which then wins over the file's "model",
// as in vLLM), and "--config FILE" stays as "--config=FILE". Unchanged without one.
// INVALID_ARGUMENT, naming the flag and the file, for a second --config, none after it, or a bad
// file.
absl::StatusOr<std::vector<std::string>> PullConfigFileArguments(std::vector<std::string> args);

// The command-line words of one parsed config file (`path` names it in
// errors).
absl::StatusOr<std::vector<std::string>> ConfigFileWords(const nlohmann::ordered_json& config,
                                                         const std::string& path);

}  // namespace pagoda

#endif  // PAGODA_COMMON_CONFIG_FILE_H_
