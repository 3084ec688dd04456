// BackgroundLane: work runs on the loop in order, yields to what the loop
// queued meanwhile, and never takes more threads than its pump bound.
#include "scheduler/api/background_lane.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/post.hpp"
#include "gtest/gtest.h"

namespace pagoda::scheduler {
namespace {

using std::chrono::microseconds;

// Holds the calling thread for `duration` (work that takes its time).
void Spin(microseconds duration) {
  const auto until = std::chrono::steady_clock::now() + duration;
  while (std::chrono::steady_clock::now() < until) {
  }
}

TEST(BackgroundLaneTest, WorkPostedFromAnotherThreadRunsInOrder) {
  boost::asio::io_context io;
  BackgroundLane lane(io, /*max_pumps=*/1, microseconds(200));
  std::vector<int> order;
  std::thread poster([&] {
    for (int i = 0; i < 100; ++i) lane.Post([&order, i] { order.push_back(i); });
  });
  poster.join();
  io.run();
  ASSERT_EQ(order.size(), 100u);
  EXPECT_TRUE(std::is_sorted(order.begin(), order.end()));
}

// The point of the lane: a handler queued on the loop behind a long backlog
// of lane work runs after about one slice of it, not after all of it (as it
// would behind plain posts).
TEST(BackgroundLaneTest, ABacklogYieldsToWhatTheLoopQueuedAfterASlice) {
  boost::asio::io_context io;
  BackgroundLane lane(io, /*max_pumps=*/1, microseconds(200));
  constexpr int kItems = 200;  // 100 us each: 20 ms in all.
  std::atomic<int> ran{0};
  for (int i = 0; i < kItems; ++i) {
    lane.Post([&ran] {
      Spin(microseconds(100));
      ran.fetch_add(1);
    });
  }
  int ran_before_urgent = -1;
  boost::asio::post(io, [&] { ran_before_urgent = ran.load(); });
  io.run();
  EXPECT_EQ(ran.load(), kItems);
  // One slice is 2 or 3 items; a preempted host may stretch it, never to 20.
  EXPECT_GE(ran_before_urgent, 1);
  EXPECT_LT(ran_before_urgent, 20);
}

TEST(BackgroundLaneTest, NoMoreWorkRunsAtOnceThanItsPumps) {
  boost::asio::io_context io;
  auto keep = boost::asio::make_work_guard(io);
  BackgroundLane lane(io, /*max_pumps=*/2, microseconds(200));
  std::atomic<int> running{0}, most{0}, done{0};
  constexpr int kItems = 64;
  for (int i = 0; i < kItems; ++i) {
    lane.Post([&] {
      const int now = running.fetch_add(1) + 1;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      Spin(microseconds(300));
      running.fetch_sub(1);
      done.fetch_add(1);
    });
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([&io] { io.run(); });
  while (done.load() < kItems) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  keep.reset();
  for (std::thread& thread : threads) thread.join();
  EXPECT_LE(most.load(), 2);
  EXPECT_GE(most.load(), 1);
}

}  // namespace
}  // namespace pagoda::scheduler
