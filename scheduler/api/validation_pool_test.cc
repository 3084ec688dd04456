#include "scheduler/api/validation_pool.h"

#include <atomic>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace pagoda::scheduler {
namespace {

TEST(ValidationPoolTest, RunsTasksOffTheCallersThread) {
  std::atomic<int> ran{0};
  {
    ValidationPool pool(2, 16);
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(pool.TrySubmit([&] { ++ran; }));
  }  // The destructor runs what was accepted.
  EXPECT_EQ(ran.load(), 10);
}

TEST(ValidationPoolTest, RefusesWorkBeyondItsBound) {
  absl::Notification release;
  absl::Notification started;
  ValidationPool pool(1, 2);
  ASSERT_TRUE(pool.TrySubmit([&] {
    started.Notify();
    release.WaitForNotification();
  }));
  started.WaitForNotification();  // The only thread is busy.
  EXPECT_TRUE(pool.TrySubmit([] {}));
  EXPECT_TRUE(pool.TrySubmit([] {}));
  EXPECT_FALSE(pool.TrySubmit([] {}));  // Two waiting: full.
  release.Notify();
}

}  // namespace
}  // namespace pagoda::scheduler
