#include "worker/cpu/host_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1 uapi; older C libraries lack the name.
#endif

namespace pagoda::worker {
namespace {

constexpr size_t kAlignment = 64;

uintptr_t RoundUp(uintptr_t value, size_t to) { return (value + to - 1) / to * to; }
uintptr_t RoundDown(uintptr_t value, size_t to) { return value / to * to; }

// An anonymous mapping of `bytes` (a multiple of 2 MiB) starting on a 2 MiB
// boundary, advised for huge pages; null when mmap fails.
char* MapHugePageAligned(size_t bytes) {
  const size_t padded = bytes + kHugePageBytes;
  void* raw = mmap(nullptr, padded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = RoundUp(start, kHugePageBytes);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t tail = start + padded - (aligned + bytes);
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  char* base = reinterpret_cast<char*>(aligned);
  madvise(base, bytes, MADV_HUGEPAGE);
  return base;
}

struct Slab {
  size_t size = 0;  // Bytes mapped.
  size_t used = 0;  // Bytes handed out (the next buffer starts here).
  int live = 0;     // Buffers not yet freed.
};

class SlabAllocator {
 public:
  void* Allocate(size_t bytes) {
    bytes = RoundUp(bytes, kAlignment);
    std::lock_guard<std::mutex> lock(mutex_);
    if (bytes > kSlabBytes / 2) return NewSlab(RoundUp(bytes, kHugePageBytes), bytes);
    auto current = slabs_.find(current_);
    if (current == slabs_.end() || current->second.size - current->second.used < bytes) {
      ReleaseIfEmpty(current);
      current_ = reinterpret_cast<uintptr_t>(NewSlab(kSlabBytes, 0));
      current = slabs_.find(current_);
      if (current == slabs_.end()) return nullptr;
    }
    Slab& slab = current->second;
    char* p = reinterpret_cast<char*>(current->first) + slab.used;
    slab.used += bytes;
    ++slab.live;
    return p;
  }

  void Free(void* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto slab = Find(p);
    if (slab == slabs_.end()) return;
    --slab->second.live;
    if (slab->first != current_) ReleaseIfEmpty(slab);
  }

  // The slab range [begin, end) holding p, or {0, 0}.
  std::pair<uintptr_t, uintptr_t> RangeOf(const void* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto slab = Find(p);
    if (slab == slabs_.end()) return {0, 0};
    return {slab->first, slab->first + slab->second.size};
  }

  std::vector<std::pair<uintptr_t, uintptr_t>> Ranges() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
    for (const auto& [base, slab] : slabs_) ranges.emplace_back(base, base + slab.size);
    return ranges;
  }

 private:
  using SlabMap = std::map<uintptr_t, Slab>;

  // A new slab of `size` bytes whose first `first_buffer` bytes (0: none)
  // are handed out at once.
  char* NewSlab(size_t size, size_t first_buffer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    char* base = MapHugePageAligned(size);
    if (base == nullptr) return nullptr;
    slabs_[reinterpret_cast<uintptr_t>(base)] =
        Slab{.size = size, .used = first_buffer, .live = first_buffer > 0 ? 1 : 0};
    return base;
  }

  SlabMap::iterator Find(const void* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    const uintptr_t address = reinterpret_cast<uintptr_t>(p);
    auto after = slabs_.upper_bound(address);
    if (after == slabs_.begin()) return slabs_.end();
    auto slab = std::prev(after);
    return address < slab->first + slab->second.size ? slab : slabs_.end();
  }

  void ReleaseIfEmpty(SlabMap::iterator slab) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    if (slab == slabs_.end() || slab->second.live > 0) return;
    munmap(reinterpret_cast<void*>(slab->first), slab->second.size);
    if (slab->first == current_) current_ = 0;
    slabs_.erase(slab);
  }

  std::mutex mutex_;
  SlabMap slabs_ ABSL_GUARDED_BY(mutex_);
  uintptr_t current_ ABSL_GUARDED_BY(mutex_) = 0;  // The slab small buffers are carved from.
};

SlabAllocator& Slabs() {
  static SlabAllocator* const slabs =
      new SlabAllocator();  // Never destroyed: buffers may outlive main.
  return *slabs;
}

// "Name:   123 kB" -> bytes, or false when the line is not `name`.
bool ReadKilobytes(const char* line, const char* name, size_t* bytes) {
  const size_t length = std::strlen(name);
  if (std::strncmp(line, name, length) != 0) return false;
  *bytes = std::strtoull(line + length, nullptr, 10) * 1024;
  return true;
}

}  // namespace

void* AllocateHost(size_t bytes) {
  if (bytes >= kSmallBytes) return Slabs().Allocate(bytes);
  void* p = nullptr;
  return posix_memalign(&p, kAlignment, RoundUp(bytes, kAlignment)) == 0 ? p : nullptr;
}

void FreeHost(void* p, size_t bytes) {
  if (p == nullptr) return;
  if (bytes >= kSmallBytes) {
    Slabs().Free(p);
  } else {
    std::free(p);
  }
}

void CollapseToHugePages(void* p, size_t bytes) {
  const auto [slab_begin, slab_end] = Slabs().RangeOf(p);
  if (slab_begin == slab_end) return;
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  const uintptr_t begin = RoundDown(address, kHugePageBytes);
  const uintptr_t end = std::min<uintptr_t>(slab_end, RoundUp(address + bytes, kHugePageBytes));
  madvise(reinterpret_cast<void*>(begin), end - begin, MADV_COLLAPSE);
}

HugePageUsage CurrentHugePageUsage() {
  const std::vector<std::pair<uintptr_t, uintptr_t>> ranges = Slabs().Ranges();
  HugePageUsage usage;
  for (const auto& [begin, end] : ranges) usage.slab_bytes += end - begin;
  FILE* smaps = std::fopen("/proc/self/smaps", "r");
  if (smaps == nullptr) return usage;
  char line[512];
  bool in_slab = false;  // Whether the mapping being read starts inside a slab.
  while (std::fgets(line, sizeof(line), smaps) != nullptr) {
    // A mapping's header starts with its address in lower-case hex; its
    // fields ("Rss:", ...) with a capital letter.
    unsigned long start = 0, stop = 0;
    const bool header = (line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f');
    if (header && std::sscanf(line, "%lx-%lx", &start, &stop) == 2) {
      in_slab = false;
      for (const auto& [begin, end] : ranges) in_slab |= start >= begin && start < end;
      continue;
    }
    size_t bytes = 0;
    if (!in_slab) continue;
    if (ReadKilobytes(line, "Rss:", &bytes)) usage.resident_bytes += bytes;
    if (ReadKilobytes(line, "AnonHugePages:", &bytes)) usage.huge_bytes += bytes;
  }
  std::fclose(smaps);
  return usage;
}

}  // namespace pagoda::worker
