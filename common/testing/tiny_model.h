#ifndef PAGODA_COMMON_TESTING_TINY_MODEL_H_
#define PAGODA_COMMON_TESTING_TINY_MODEL_H_

#include <string>

#include "absl/status/status.h"

namespace pagoda::testing {

// A path in the temporary directory, `prefix`_<pid>, for one test binary's
// files (not created).
std::string TempPath(const std::string& prefix);

// Writes a random model to `dir` with scripts/make_tiny_model.py and the
// given flags (everything but --out). Runs $PAGODA_PYTHON3 (else
// /usr/bin/python3) from the working directory, which ctest sets to the
// repository root.
absl::Status WriteTinyModel(const std::string& dir, const std::string& flags);

}  // namespace pagoda::testing

#endif  // PAGODA_COMMON_TESTING_TINY_MODEL_H_
