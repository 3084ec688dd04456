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

// LoadLoraAdapter, then this rank's slice under tensor parallelism.
LoraAdapterReader DefaultLoraReader(const ModelConfig& base, const TensorParallelShard& shard,
                                    int max_rank, int max_trainable_tokens) {
  return [&base, &shard, max_rank,
          max_trainable_tokens](const std::string& path) -> absl::StatusOr<LoraAdapter> {
    absl::StatusOr<LoraAdapter> adapter =
        LoadLoraAdapter(path, base, max_rank, max_trainable_tokens);
    if (!adapter.ok() || shard.world_size <= 1) return adapter;
    return ShardLoraAdapter(*adapter, base, shard);
  };
}

}  // namespace

absl::Status CheckLoraLimits(int max_loras, int max_lora_rank, int max_cpu_loras,
                             int max_trainable_tokens) {
  if (max_loras < 0 || max_loras > kMaxLoraSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_loras must be in [0, ", kMaxLoraSlots, "], got ", max_loras));
  }
  if (max_cpu_loras < 0 || max_cpu_loras > kMaxCpuLoras) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_cpu_loras must be in [0, ", kMaxCpuLoras, "], got ", max_cpu_loras));
  }
  if (max_trainable_tokens < 0 || max_trainable_tokens > kMaxLoraTrainableTokens) {
    return absl::InvalidArgumentError(absl::StrCat("max_lora_trainable_tokens must be in [0, ",
                                                   kMaxLoraTrainableTokens, "], got ",
                                                   max_trainable_tokens));
  }
  if (max_loras > 0 && (max_lora_rank < 1 || max_lora_rank > kMaxLoraRank)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_lora_rank must be in [1, ", kMaxLoraRank, "], got ", max_lora_rank));
  }
  return absl::OkStatus();
}

LoraAdapterLoader::LoraAdapterLoader(ModelConfig base, TensorParallelShard shard,
                                     std::shared_ptr<LoraSlots> slots, int max_cpu_loras,
                                     LoraAdapterReader reader)
    : base_(std::move(base)),
      shard_(std::move(shard)),
      slots_(std::move(slots)),
      cache_capacity_(max_cpu_loras > 0 ? max_cpu_loras : slots_->max_loras()),
      reader_(reader ? std::move(reader)
                     : DefaultLoraReader(base_, shard_, slots_->max_rank(),
                                         slots_->max_trainable_tokens())),
      cache_(cache_capacity_) {}

int LoraAdapterLoader::cached_adapters() {
  absl::MutexLock lock(&load_mutex_);
  return cache_.size();
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
  std::error_code error;
  const std::string canonical = std::filesystem::canonical(path, error).string();
  if (error) {
    return absl::NotFoundError(
        absl::StrCat("LoRA adapter path '", path, "' cannot be resolved: ", error.message()));
  }
  bool cached = false;
  absl::StatusOr<std::shared_ptr<const LoraAdapter>> adapter = CachedOrRead(canonical, &cached);
  if (!adapter.ok()) return adapter.status();
  if (absl::Status status = slots_->Load(slot, **adapter); !status.ok()) return status;
  return LoraLoadResult{
      .rank = (*adapter)->config.rank,
      .bytes = static_cast<int64_t>((*adapter)->bytes()),
      .seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
      .cached = cached};
}

absl::StatusOr<std::shared_ptr<const LoraAdapter>> LoraAdapterLoader::CachedOrRead(
    const std::string& canonical, bool* cached) {
  // Stat'ed before the read: a file replaced in between is cached under its
  // old identity, so the next load sees the change and reads it again.
  const std::optional<LoraFilesIdentity> identity = StatLoraFiles(canonical);
  if (identity) {
    if (std::shared_ptr<const LoraAdapter> hit = cache_.Find(canonical, *identity)) {
      *cached = true;
      return hit;
    }
  }
  absl::StatusOr<LoraAdapter> read = reader_(canonical);
  if (!read.ok()) return read.status();
  auto adapter = std::make_shared<const LoraAdapter>(*std::move(read));
  if (identity) cache_.Insert(canonical, *identity, adapter);
  return adapter;
}

absl::Status LoraAdapterLoader::Unload(int slot) {
  if (absl::Status status = CheckSlot(slot); !status.ok()) return status;
  slots_->Unload(slot);
  return absl::OkStatus();
}

}  // namespace pagoda::worker
