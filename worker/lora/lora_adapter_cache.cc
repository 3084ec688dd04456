#include "worker/lora/lora_adapter_cache.h"

#include <sys/stat.h>

#include <algorithm>
#include <utility>

namespace pagoda::worker {
namespace {

std::optional<LoraFilesIdentity::File> StatLoraAdapterFile(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return std::nullopt;
  return LoraFilesIdentity::File{
      .device = static_cast<uint64_t>(info.st_dev),
      .inode = static_cast<uint64_t>(info.st_ino),
      .size = static_cast<int64_t>(info.st_size),
      .mtime_ns = static_cast<int64_t>(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec};
}

}  // namespace

std::optional<LoraFilesIdentity> StatLoraFiles(const std::string& dir) {
  auto config = StatLoraAdapterFile(dir + "/adapter_config.json");
  auto weights = StatLoraAdapterFile(dir + "/adapter_model.safetensors");
  if (!config || !weights) return std::nullopt;
  return LoraFilesIdentity{.config = *config, .weights = *weights};
}

std::shared_ptr<const LoraAdapter> LoraAdapterCache::Find(const std::string& canonical_path,
                                                          const LoraFilesIdentity& identity) {
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [&](const Entry& entry) { return entry.path == canonical_path; });
  if (it == entries_.end()) return nullptr;
  if (!(it->identity == identity)) {  // Replaced on disk: the copy is stale.
    Erase(it);
    return nullptr;
  }
  entries_.splice(entries_.begin(), entries_, it);
  return it->adapter;
}

void LoraAdapterCache::Insert(const std::string& canonical_path, const LoraFilesIdentity& identity,
                              std::shared_ptr<const LoraAdapter> adapter) {
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [&](const Entry& entry) { return entry.path == canonical_path; });
  if (it != entries_.end()) Erase(it);
  if (capacity_ <= 0 || adapter == nullptr) return;
  bytes_ += adapter->bytes();
  entries_.push_front(Entry{canonical_path, identity, std::move(adapter)});
  while (static_cast<int>(entries_.size()) > capacity_) Erase(std::prev(entries_.end()));
}

bool LoraAdapterCache::Contains(const std::string& canonical_path) const {
  return std::any_of(entries_.begin(), entries_.end(),
                     [&](const Entry& entry) { return entry.path == canonical_path; });
}

void LoraAdapterCache::Erase(std::list<Entry>::iterator it) {
  bytes_ -= it->adapter->bytes();
  entries_.erase(it);
}

}  // namespace pagoda::worker
