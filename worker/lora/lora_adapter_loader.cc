#include "worker/lora/lora_adapter_loader.h"

#include <chrono>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/lora_adapter.h"
#include "common/lora_shard.h"

namespace pagoda::worker {
namespace {

// The request's path as the loader may read it: absolute, bounded, no NUL
// (a C path would stop there and read another file than the one named), an
// existing directory.
absl::Status CheckAdapterPath(const std::string& path) {
  if (path.empty() || path.size() > kMaxLoraPathBytes) {
    return absl::InvalidArgumentError(absl::StrCat("LoRA adapter path must be 1..",
                                                   kMaxLoraPathBytes, " bytes, got ", path.size()));
  }
  if (path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("LoRA adapter path holds a NUL byte");
  }
  if (path.front() != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("LoRA adapter path '", path, "' is not absolute"));
  }
  std::error_code error;
  if (!std::filesystem::is_directory(path, error)) {
    return absl::NotFoundError(absl::StrCat("LoRA adapter path '", path, "' is not a directory",
                                            error ? absl::StrCat(": ", error.message()) : ""));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckLoraLimits(int max_loras, int max_lora_rank) {
  if (max_loras < 0 || max_loras > kMaxLoraSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_loras must be in [0, ", kMaxLoraSlots, "], got ", max_loras));
  }
  if (max_loras > 0 && (max_lora_rank < 1 || max_lora_rank > kMaxLoraRank)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_lora_rank must be in [1, ", kMaxLoraRank, "], got ", max_lora_rank));
  }
  return absl::OkStatus();
}

absl::Status LoraAdapterLoader::CheckSlot(int slot) const {
  if (slot < 1 || slot > slots_->max_loras()) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoRA slot ", slot, " is outside [1, ", slots_->max_loras(), "]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<LoraLoadResult> LoraAdapterLoader::Load(int slot, const std::string& path) {
  if (absl::Status status = CheckSlot(slot); !status.ok()) return status;
  if (absl::Status status = CheckAdapterPath(path); !status.ok()) return status;
  absl::MutexLock lock(&load_mutex_);
  const auto start = std::chrono::steady_clock::now();
  slots_->Unload(slot);  // A failed load leaves the slot empty, not stale.
  absl::StatusOr<LoraAdapter> adapter = LoadLoraAdapter(path, base_, slots_->max_rank());
  if (!adapter.ok()) return adapter.status();
  if (shard_.world_size > 1) {
    adapter = ShardLoraAdapter(*adapter, base_, shard_);
    if (!adapter.ok()) return adapter.status();
  }
  if (absl::Status status = slots_->Load(slot, *adapter); !status.ok()) return status;
  return LoraLoadResult{
      .rank = adapter->config.rank,
      .bytes = static_cast<int64_t>(adapter->bytes()),
      .seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

absl::Status LoraAdapterLoader::Unload(int slot) {
  if (absl::Status status = CheckSlot(slot); !status.ok()) return status;
  slots_->Unload(slot);
  return absl::OkStatus();
}

}  // namespace pagoda::worker
