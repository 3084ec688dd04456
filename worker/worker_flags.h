#ifndef PAGODA_WORKER_WORKER_FLAGS_H_
#define PAGODA_WORKER_WORKER_FLAGS_H_

// pagoda-worker's flags, read once into a WorkerConfig. The only place
// under worker/ that defines or reads a flag.

#include <vector>

#include "absl/status/statusor.h"
#include "common/flags.h"
#include "worker/worker_config.h"

namespace pagoda::worker {

// The parsed command line as a checked WorkerConfig
// (CheckAndResolveWorkerConfig's rules).
// REQUIRES: the command line was parsed (ParsePagodaCommandLine).
absl::StatusOr<WorkerConfig> WorkerConfigFromFlags();

// The flags by group, in the order --help prints them; every worker flag is
// in exactly one.
std::vector<FlagGroup> WorkerFlagGroups();

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_WORKER_FLAGS_H_
