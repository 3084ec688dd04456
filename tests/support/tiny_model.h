#ifndef PAGODA_TESTS_SUPPORT_TINY_MODEL_H_
#define PAGODA_TESTS_SUPPORT_TINY_MODEL_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "text/tokenizer.h"

namespace pagoda::testing {

// The Python that tests run: $PAGODA_PYTHON3 (ctest sets it), else
// /usr/bin/python3.
std::string PythonBinary();

// A path in the temporary directory, `prefix`_<pid>, for one test binary's
// files (not created).
std::string TempPath(const std::string& prefix);

// Writes a random model to `dir` with scripts/make_tiny_model.py and the
// given flags (everything but --out). Runs PythonBinary() from the working
// directory, which ctest sets to the repository root.
absl::Status WriteTinyModel(const std::string& dir, const std::string& flags);

// Writes a one-layer model with a sentencepiece tokenizer of `vocab_size`
// pieces (byte fallback from 384 pieces on) to `dir`; returns its tokenizer.
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeTinyTokenizer(const std::string& dir,
                                                             int vocab_size);

}  // namespace pagoda::testing

#endif  // PAGODA_TESTS_SUPPORT_TINY_MODEL_H_
