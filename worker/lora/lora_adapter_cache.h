// LoraAdapterCache: the worker's host cache of parsed adapters
// (--max-cpu-loras), this rank's slices in f32, least recently used first
// out, so a slot reloaded with an adapter read before does not touch the
// disk. Keyed by the adapter directory's canonical path and the identity of
// its two files (device, inode, size, mtime), so a replaced file is read
// again.
#ifndef PAGODA_WORKER_LORA_LORA_ADAPTER_CACHE_H_
#define PAGODA_WORKER_LORA_LORA_ADAPTER_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>

#include "common/lora_adapter.h"

namespace pagoda::worker {

// What a cached adapter's files were when they were read; a difference means
// the file was replaced (or rewritten) since.
struct LoraFilesIdentity {
  struct File {
    uint64_t device = 0;
    uint64_t inode = 0;
    int64_t size = 0;
    int64_t mtime_ns = 0;
    bool operator==(const File&) const = default;
  };
  File config;
  File weights;
  bool operator==(const LoraFilesIdentity&) const = default;
};

// The identity of `dir`'s adapter_config.json and adapter_model.safetensors;
// nullopt when either cannot be stat'ed (the read that follows then says why).
std::optional<LoraFilesIdentity> StatLoraFiles(const std::string& dir);

// Not thread-safe: LoraAdapterLoader holds it under its load lock.
class LoraAdapterCache {
 public:
  // Keeps at most `capacity` adapters; 0 keeps none.
  explicit LoraAdapterCache(int capacity) : capacity_(capacity) {}

  // The adapter read from `canonical_path` when its files were `identity`,
  // now the most recently used; null when absent or its files changed.
  std::shared_ptr<const LoraAdapter> Find(const std::string& canonical_path,
                                          const LoraFilesIdentity& identity);
  // Keeps `adapter` as the most recently used, replacing an entry of the
  // same path and evicting the least recently used past the capacity.
  void Insert(const std::string& canonical_path, const LoraFilesIdentity& identity,
              std::shared_ptr<const LoraAdapter> adapter);

  int capacity() const { return capacity_; }
  int size() const { return static_cast<int>(entries_.size()); }
  size_t bytes() const { return bytes_; }  // f32 A and B of every entry.
  // Whether `canonical_path` is held (whatever its identity); no reordering.
  bool Contains(const std::string& canonical_path) const;

 private:
  struct Entry {
    std::string path;
    LoraFilesIdentity identity;
    std::shared_ptr<const LoraAdapter> adapter;
  };
  void Erase(std::list<Entry>::iterator it);

  const int capacity_;
  std::list<Entry> entries_;  // Most recently used first; at most a few hundred.
  size_t bytes_ = 0;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_LORA_LORA_ADAPTER_CACHE_H_
