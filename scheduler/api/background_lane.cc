#include "scheduler/api/background_lane.h"

#include <utility>

#include "boost/asio/post.hpp"

namespace pagoda::scheduler {

BackgroundLane::BackgroundLane(boost::asio::io_context& io, int max_pumps,
                               std::chrono::microseconds slice)
    : io_(io), max_pumps_(max_pumps < 1 ? 1 : max_pumps), slice_(slice) {}

void BackgroundLane::Post(std::function<void()> work) {
  {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(work));
    if (pumps_ >= max_pumps_ || static_cast<int>(queue_.size()) <= pumps_) return;
    ++pumps_;
  }
  boost::asio::post(io_, [this] { Pump(); });
}

void BackgroundLane::Pump() {
  const auto until = std::chrono::steady_clock::now() + slice_;
  do {
    std::function<void()> work;
    {
      absl::MutexLock lock(&mu_);
      if (queue_.empty()) {
        --pumps_;
        return;
      }
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    work();
  } while (std::chrono::steady_clock::now() < until);
  // To the end of the loop's queue: what arrived during this slice runs first.
  boost::asio::post(io_, [this] { Pump(); });
}

}  // namespace pagoda::scheduler
