#include "worker/cpu/thread_pool.h"

#include <pthread.h>

#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace pagoda::worker {
namespace {

TEST(ThreadPoolTest, AvailableCpuCountIsPositive) { EXPECT_GE(AvailableCpuCount(), 1); }

TEST(ThreadPoolTest, EveryIndexRunsExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 5, 17, 1000, 4099}) {
      for (int64_t grain : {1, 3, 64}) {
        std::vector<std::atomic<int>> hits(n);
        pool.ParallelFor(n, grain, [&](int64_t begin, int64_t end) {
          ASSERT_LE(0, begin);
          ASSERT_LT(begin, end);
          ASSERT_LE(end, n);
          if (end != n) {
            ASSERT_GE(end - begin, grain);  // Only the last may be short.
          }
          for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(hits[i].load(), 1) << "threads=" << threads << " n=" << n << " i=" << i;
        }
      }
    }
  }
}

TEST(ThreadPoolTest, UsesSeveralThreadsForLargeWork) {
  ThreadPool pool(4);
  std::mutex mutex;
  std::set<std::thread::id> ids;
  // Repeat: on a busy machine one round may be finished by fewer threads.
  for (int round = 0; round < 200 && ids.size() < 2; ++round) {
    pool.ParallelFor(64, 1, [&](int64_t, int64_t) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      std::lock_guard<std::mutex> lock(mutex);
      ids.insert(std::this_thread::get_id());
    });
  }
  EXPECT_GE(ids.size(), 2u);
}

TEST(ThreadPoolTest, WorkersAreNamedByIndex) {
  ThreadPool pool(3);
  std::mutex mutex;
  std::set<std::string> names;
  const std::thread::id caller = std::this_thread::get_id();
  for (int round = 0; round < 200 && names.size() < 2; ++round) {
    pool.ParallelFor(64, 1, [&](int64_t, int64_t) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (std::this_thread::get_id() == caller) return;
      char name[16] = {};
      ASSERT_EQ(pthread_getname_np(pthread_self(), name, sizeof(name)), 0);
      std::lock_guard<std::mutex> lock(mutex);
      names.insert(name);
    });
  }
  // Every worker that ran a chunk is named (on a busy machine one of the
  // two may not have joined in 200 rounds; it takes one to tell).
  const std::set<std::string> expected = {"pagoda-cpu-1", "pagoda-cpu-2"};
  ASSERT_FALSE(names.empty());
  for (const std::string& name : names) EXPECT_TRUE(expected.count(name)) << name;
}

TEST(ThreadPoolTest, NestedParallelForRunsInline) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  pool.ParallelFor(8, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      pool.ParallelFor(10, 1, [&](int64_t b, int64_t e) { total.fetch_add(e - b); });
    }
  });
  EXPECT_EQ(total.load(), 80);
}

TEST(ThreadPoolTest, ManyShortCallsInARowComplete) {
  ThreadPool pool(2);
  int64_t sum = 0;
  for (int call = 0; call < 5000; ++call) {
    std::atomic<int64_t> count{0};
    pool.ParallelFor(2, 1, [&](int64_t begin, int64_t end) { count.fetch_add(end - begin); });
    sum += count.load();
  }
  EXPECT_EQ(sum, 10000);
}

}  // namespace
}  // namespace pagoda::worker
