#include "scheduler/lora/lora_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pagoda::lora {
namespace {

absl::Status Unknown(absl::string_view name) {
  return absl::NotFoundError(
      absl::StrCat("the LoRA adapter \"", name.substr(0, 256), "\" is not loaded"));
}

}  // namespace

absl::StatusOr<int> LoraRegistry::Add(LoraModuleSpec spec) {
  if (absl::Status status = CheckLoraName(spec.name); !status.ok()) return status;
  absl::MutexLock lock(&mutex_);
  if (by_name_.count(spec.name) > 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("the LoRA adapter \"", spec.name, "\" has already been loaded"));
  }
  if (by_name_.size() >= kMaxRegisteredLoras) {
    return absl::ResourceExhaustedError(
        absl::StrCat("at most ", kMaxRegisteredLoras, " LoRA adapters can be loaded"));
  }
  const int id = next_id_++;
  std::string name = spec.name;
  by_name_.emplace(std::move(name), LoraEntry{id, std::move(spec), 0});
  return id;
}

absl::StatusOr<int> LoraRegistry::Remove(absl::string_view name) {
  absl::MutexLock lock(&mutex_);
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return Unknown(name);
  if (it->second.requests > 0) {
    return absl::FailedPreconditionError(absl::StrCat("the LoRA adapter \"", name,
                                                      "\" is in use by ", it->second.requests,
                                                      " request(s); unload it once they finish"));
  }
  const int id = it->second.id;
  by_name_.erase(it);
  return id;
}

absl::StatusOr<int> LoraRegistry::Acquire(absl::string_view name) {
  absl::MutexLock lock(&mutex_);
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return Unknown(name);
  ++it->second.requests;
  return it->second.id;
}

void LoraRegistry::Release(int id) {
  absl::MutexLock lock(&mutex_);
  for (auto& [name, entry] : by_name_) {
    if (entry.id == id && entry.requests > 0) {
      --entry.requests;
      return;
    }
  }
}

absl::StatusOr<LoraEntry> LoraRegistry::Find(absl::string_view name) const {
  absl::MutexLock lock(&mutex_);
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return Unknown(name);
  return it->second;
}

absl::StatusOr<LoraEntry> LoraRegistry::FindById(int id) const {
  absl::MutexLock lock(&mutex_);
  for (const auto& [name, entry] : by_name_) {
    if (entry.id == id) return entry;
  }
  return absl::NotFoundError(absl::StrCat("no LoRA adapter has id ", id));
}

std::vector<LoraEntry> LoraRegistry::List() const {
  absl::MutexLock lock(&mutex_);
  std::vector<LoraEntry> entries;
  for (const auto& [name, entry] : by_name_) entries.push_back(entry);
  std::sort(entries.begin(), entries.end(),
            [](const LoraEntry& a, const LoraEntry& b) { return a.id < b.id; });
  return entries;
}

}  // namespace pagoda::lora
