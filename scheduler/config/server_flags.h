#ifndef PAGODA_SCHEDULER_CONFIG_SERVER_FLAGS_H_
#define PAGODA_SCHEDULER_CONFIG_SERVER_FLAGS_H_

// pagoda-server's flags (vLLM's names where vLLM has one), read once into a
// ServerConfig. The only place in the server that reads a flag.

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/flags.h"
#include "scheduler/config/server_config.h"

namespace pagoda::scheduler {

// The parsed command line as a checked ServerConfig (CheckServerConfig's
// rules; the model-dependent ones are ResolveForModel's). --api-key falls
// back to the PAGODA_API_KEY environment variable. `arguments`, the
// positional ones after the program's name: none, or the model directory
// instead of --model (vLLM's `vllm serve MODEL`); anything more, or both
// spellings of the model, is refused.
// REQUIRES: the command line was parsed (ParsePagodaCommandLine).
absl::StatusOr<ServerConfig> ServerConfigFromFlags(const std::vector<std::string>& arguments = {});

// The flags by group, in the order --help prints them; every server flag is
// in exactly one.
std::vector<FlagGroup> ServerFlagGroups();

// The flags whose value is a JSON object (vLLM's config objects), which
// also take vLLM's --NAME.KEY VALUE spelling (common/json_flag_keys.h).
std::vector<std::string> ServerJsonFlags();

// vLLM's short spellings of server flags: -tp, -q.
std::vector<std::pair<std::string, std::string>> ServerFlagAliases();

// The flags that take several words, as vLLM's nargs="+" ones:
// --lora-modules, --served-model-name.
std::vector<std::string> ServerListFlags();

// The integer flags vLLM reads as human_readable_int ("32k").
std::vector<std::string> ServerHumanReadableIntFlags();

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_CONFIG_SERVER_FLAGS_H_
