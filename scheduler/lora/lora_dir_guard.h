// The --lora-dir security bar: a runtime adapter load may only read a
// directory that, with every symlink and ".." resolved, lies inside
// --lora-dir. vLLM has no such guard; without it a client that may load
// adapters could make the server read any directory it can.
#ifndef PAGODA_SCHEDULER_LORA_LORA_DIR_GUARD_H_
#define PAGODA_SCHEDULER_LORA_LORA_DIR_GUARD_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pagoda::lora {

// The canonical path of `requested` (relative paths are taken relative to
// `lora_dir`) when it resolves inside the canonical `lora_dir` (the
// directory itself excluded). PERMISSION_DENIED when `lora_dir` is empty
// (runtime loads are off), when the resolved path is elsewhere, or when
// `requested` holds a NUL byte; NOT_FOUND when it does not exist (only
// after the containment check on its lexically normalised form, so a probe
// learns nothing about paths outside). The caller must load from the
// returned path, not from `requested`.
absl::StatusOr<std::string> ResolveUnderLoraDir(const std::string& lora_dir,
                                                absl::string_view requested);

}  // namespace pagoda::lora

#endif  // PAGODA_SCHEDULER_LORA_LORA_DIR_GUARD_H_
