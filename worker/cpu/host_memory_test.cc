// The CPU backend's host memory: alignment, buffers carved one after another
// from a slab, large buffers on their own 2 MiB-aligned mappings, slabs
// returned when their last buffer goes, contents kept by a collapse, and the
// huge-page report's bounds. (Whether the kernel grants huge pages depends on
// the machine, so no test requires it.)

#include "worker/cpu/host_memory.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace pagoda::worker {
namespace {

uintptr_t Address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

TEST(HostMemoryTest, SmallAndLargeBuffersAreAlignedAndWritable) {
  for (size_t bytes : {size_t{1}, size_t{63}, size_t{4096}, kSmallBytes - 1, kSmallBytes,
                       kSmallBytes + 3, kHugePageBytes + 5, kSlabBytes}) {
    void* p = AllocateHost(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(Address(p) % 64, 0u) << bytes;
    std::memset(p, 0x5a, bytes);
    EXPECT_EQ(static_cast<unsigned char*>(p)[bytes - 1], 0x5a);
    FreeHost(p, bytes);
  }
}

TEST(HostMemoryTest, MediumBuffersShareASlabBackToBack) {
  const size_t bytes = kSmallBytes + 100;  // Rounded up to 64 inside the slab.
  void* first = AllocateHost(bytes);
  void* second = AllocateHost(bytes);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  // The second follows the first unless the first filled its slab.
  if (Address(second) > Address(first)) {
    EXPECT_EQ(Address(second) - Address(first), (bytes + 63) / 64 * 64);
  }
  std::memset(first, 1, bytes);
  std::memset(second, 2, bytes);
  EXPECT_EQ(static_cast<unsigned char*>(first)[bytes - 1], 1);
  FreeHost(first, bytes);
  FreeHost(second, bytes);
}

TEST(HostMemoryTest, LargeBuffersGetTheirOwnHugePageAlignedMappingReturnedOnFree) {
  const size_t before = CurrentHugePageUsage().slab_bytes;
  const size_t bytes = kSlabBytes / 2 + 1;
  void* p = AllocateHost(bytes);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(Address(p) % kHugePageBytes, 0u);
  const size_t mapped = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  EXPECT_EQ(CurrentHugePageUsage().slab_bytes, before + mapped);
  FreeHost(p, bytes);
  EXPECT_EQ(CurrentHugePageUsage().slab_bytes, before);
}

TEST(HostMemoryTest, CollapseKeepsContentsAndTheReportStaysInBounds) {
  const size_t bytes = 3 * kHugePageBytes + 12345;  // A partial last page.
  const size_t written = 2 * kHugePageBytes + 777;  // The rest never touched.
  auto* p = static_cast<uint32_t*>(AllocateHost(bytes));
  ASSERT_NE(p, nullptr);
  for (size_t i = 0; i < written / 4; ++i) p[i] = static_cast<uint32_t>(i * 2654435761u);
  CollapseToHugePages(p, bytes);
  for (size_t i = 0; i < written / 4; ++i) {
    ASSERT_EQ(p[i], static_cast<uint32_t>(i * 2654435761u)) << i;
  }
  for (size_t i = written / 4 + 1; i < bytes / 4; i += 1024) ASSERT_EQ(p[i], 0u) << i;
  const HugePageUsage usage = CurrentHugePageUsage();
  EXPECT_GE(usage.resident_bytes, written / 4096 * 4096);
  EXPECT_LE(usage.huge_bytes, usage.resident_bytes);
  EXPECT_LE(usage.resident_bytes, usage.slab_bytes);
  FreeHost(p, bytes);
}

TEST(HostMemoryTest, CollapseOutsideASlabIsANoOp) {
  std::vector<char> heap(kHugePageBytes, 7);
  CollapseToHugePages(heap.data(), heap.size());
  EXPECT_EQ(heap.back(), 7);
  FreeHost(nullptr, 0);  // Freeing null is allowed, as free().
}

}  // namespace
}  // namespace pagoda::worker
