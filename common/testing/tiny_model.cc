#include "common/testing/tiny_model.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace pagoda::testing {

std::string TempPath(const std::string& prefix) {
  return (std::filesystem::temp_directory_path() / absl::StrCat(prefix, "_", getpid())).string();
}

absl::Status WriteTinyModel(const std::string& dir, const std::string& flags) {
  const char* python = std::getenv("PAGODA_PYTHON3");
  const std::string command =
      absl::StrCat(python != nullptr ? python : "/usr/bin/python3",
                   " scripts/make_tiny_model.py --out ", dir, " ", flags, " > /dev/null");
  if (std::system(command.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("failed: ", command));
  }
  return absl::OkStatus();
}

}  // namespace pagoda::testing
