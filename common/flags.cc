#include "common/flags.h"

#include <algorithm>
#include <string>
#include <string_view>

#include "absl/flags/reflection.h"
#include "absl/strings/string_view.h"

namespace pagoda {

void AcceptDashedFlagNames(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    const size_t name_begin = arg[1] == '-' ? 2 : 1;
    const size_t name_end = std::min(arg.find('='), arg.size());
    if (name_end <= name_begin) continue;
    std::string name(arg.substr(name_begin, name_end - name_begin));
    for (char& c : name) {
      if (c == '-') c = '_';
    }
    // "--no-flag" negates a bool flag "flag" for Abseil: keep "no" as it is.
    const absl::string_view lookup =
        absl::FindCommandLineFlag(name) == nullptr && name.rfind("no", 0) == 0
            ? absl::string_view(name).substr(2)
            : absl::string_view(name);
    if (absl::FindCommandLineFlag(lookup) == nullptr) continue;
    for (size_t j = name_begin; j < name_end; ++j) {
      if (argv[i][j] == '-') argv[i][j] = '_';
    }
  }
}

}  // namespace pagoda
