#ifndef PAGODA_WORKER_CPU_HOST_MEMORY_H_
#define PAGODA_WORKER_CPU_HOST_MEMORY_H_

// Host buffers of the CPU backend, placed on transparent huge pages so a
// decode step's weight stream does not miss the TLB.

#include <cstddef>

namespace pagoda::worker {

// Host memory for the CPU backend's buffers, placed so that a decode step's
// weight stream runs on transparent huge pages.
//
// Why: a batch-1 decode step reads every weight once. On 4 KiB pages that is
// a TLB miss (a two-level walk inside a VM) and a hardware-prefetcher restart
// every 4 KiB. Buffers of 2 MiB and more were already 2 MiB-aligned with
// MADV_HUGEPAGE, but the many smaller ones (a 512-wide model's q/k/v, o and
// down matrices: half its bf16 weight bytes) came from malloc on 4 KiB
// pages, and a fault that found no free 2 MiB page fell back to 4 KiB for
// good. So:
// - Buffers of kSmallBytes and more are carved one after another from slabs:
//   2 MiB-aligned anonymous mappings of at least kSlabBytes with
//   MADV_HUGEPAGE, so consecutive weights share huge pages. A buffer larger
//   than half a slab gets a mapping of its own.
// - CollapseToHugePages (after the weights are written) asks the kernel to
//   turn the range's 2 MiB pages that faulted in as 4 KiB pages into huge
//   pages now (MADV_COLLAPSE, Linux 6.1+; a no-op where it is refused),
//   instead of whenever khugepaged gets to them.
// - Smaller buffers come from malloc, 64-byte aligned.
// A slab is unmapped when its last buffer is freed and it is not the slab
// being filled; freed space inside a live slab is not reused (buffers are
// allocated at load and live as long as the model).
//
// Thread safety: every function may be called from any thread.

inline constexpr size_t kHugePageBytes = size_t{2} << 20;
inline constexpr size_t kSmallBytes = size_t{64} << 10;
inline constexpr size_t kSlabBytes = size_t{32} << 20;

// `bytes` (>= 1) of uninitialised memory, 64-byte aligned; null when the
// system has none. Free with FreeHost.
void* AllocateHost(size_t bytes);
// REQUIRES: p came from AllocateHost(bytes) and is not yet freed.
void FreeHost(void* p, size_t bytes);

// Best effort: collapses the 2 MiB pages overlapping [p, p + bytes) into
// huge pages where p lies in a slab (nothing otherwise). Pages not yet
// written read as zero afterwards, as before.
void CollapseToHugePages(void* p, size_t bytes);

// Of the slabs' bytes, how many the kernel maps now, and how many of those
// on huge pages (from /proc/self/smaps): what bench_cpu_decode reports.
struct HugePageUsage {
  size_t slab_bytes = 0;
  size_t resident_bytes = 0;
  size_t huge_bytes = 0;
};
HugePageUsage CurrentHugePageUsage();

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CPU_HOST_MEMORY_H_
