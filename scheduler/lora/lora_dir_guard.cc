#include "scheduler/lora/lora_dir_guard.h"

#include <filesystem>

#include "absl/strings/str_cat.h"

namespace pagoda::lora {
namespace {

namespace fs = std::filesystem;

// True when `path` is strictly below `dir` (both normalised, absolute).
bool StrictlyInside(const fs::path& dir, const fs::path& path) {
  auto d = dir.begin(), p = path.begin();
  for (; d != dir.end(); ++d, ++p) {
    if (d->empty()) continue;  // A trailing separator of `dir`.
    if (p == path.end() || *d != *p) return false;
  }
  for (; p != path.end(); ++p) {
    if (!p->empty()) return true;
  }
  return false;
}

absl::Status Denied(absl::string_view requested) {
  return absl::PermissionDeniedError(
      absl::StrCat("LoRA path \"", requested.substr(0, 200), "\" is not inside --lora-dir"));
}

}  // namespace

absl::StatusOr<std::string> ResolveUnderLoraDir(const std::string& lora_dir,
                                                absl::string_view requested) {
  if (lora_dir.empty()) {
    return absl::PermissionDeniedError("loading LoRA adapters at run time needs --lora-dir");
  }
  if (requested.empty() || requested.find('\0') != absl::string_view::npos) {
    return Denied(requested);
  }
  std::error_code error;
  const fs::path dir = fs::canonical(lora_dir, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("--lora-dir ", lora_dir, " cannot be resolved: ", error.message()));
  }
  const fs::path asked = (dir / fs::path(std::string(requested))).lexically_normal();
  if (!StrictlyInside(dir, asked)) return Denied(requested);
  const fs::path resolved = fs::canonical(asked, error);
  if (error) {
    return absl::NotFoundError(
        absl::StrCat("LoRA path \"", requested.substr(0, 200), "\" does not exist"));
  }
  if (!StrictlyInside(dir, resolved)) return Denied(requested);
  return resolved.string();
}

}  // namespace pagoda::lora
