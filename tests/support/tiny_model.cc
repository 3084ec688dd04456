#include "tests/support/tiny_model.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace pagoda::testing {

std::string PythonBinary() {
  const char* python = std::getenv("PAGODA_PYTHON3");
  return python != nullptr ? python : "/usr/bin/python3";
}

std::string TempPath(const std::string& prefix) {
  return (std::filesystem::temp_directory_path() / absl::StrCat(prefix, "_", getpid())).string();
}

absl::Status WriteTinyModel(const std::string& dir, const std::string& flags) {
  const std::string command = absl::StrCat(PythonBinary(), " scripts/make_tiny_model.py --out ",
                                           dir, " ", flags, " > /dev/null");
  if (std::system(command.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("failed: ", command));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeTinyTokenizer(const std::string& dir,
                                                             int vocab_size) {
  if (absl::Status made = WriteTinyModel(
          dir, absl::StrCat("--vocab-size ", vocab_size,
                            " --hidden-size 32 --intermediate-size 64 --num-layers 1"
                            " --num-heads 2 --dtype f32 --tokenizer --bos-id 1 --eos-id 2"));
      !made.ok()) {
    return made;
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Load(dir);
  if (tokenizer.ok() && *tokenizer == nullptr) {
    return absl::InternalError(absl::StrCat(dir, " has no tokenizer"));
  }
  return tokenizer;
}

}  // namespace pagoda::testing
