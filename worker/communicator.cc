#include "worker/communicator.h"

#include <chrono>

namespace pagoda::worker {
namespace {

class SingleRankCommunicator final : public Communicator {
 public:
  absl::Status AllReduceSum(void* data, size_t count, DType dtype) override {
    return Check(data, count, dtype, "AllReduceSum");
  }
  absl::Status AllGather(void* data, size_t count, DType dtype) override {
    return Check(data, count, dtype, "AllGather");
  }
  void Abort() override { aborted_.store(true); }
  int rank() const override { return 0; }
  int world_size() const override { return 1; }

 private:
  // The same contract as a real group: bad arguments and Abort fail.
  absl::Status Check(void* data, size_t count, DType dtype, const char* what) {
    if (aborted_.load()) return absl::AbortedError("the communicator was aborted");
    return comm::ValidateCollectiveArgs(data, count, dtype, 1, what);
  }
  std::atomic<bool> aborted_{false};
};

// Adds the wall time of `call` to `seconds`.
template <typename Call>
absl::Status Timed(std::atomic<double>& seconds, Call call) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = call();
  const double spent =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double old = seconds.load();
  while (!seconds.compare_exchange_weak(old, old + spent)) {
  }
  return status;
}

}  // namespace

std::unique_ptr<Communicator> CreateSingleRankCommunicator() {
  return std::make_unique<SingleRankCommunicator>();
}

absl::Status TimedCommunicator::AllReduceSum(void* data, size_t count, DType dtype) {
  return Timed(seconds_, [&] { return inner_->AllReduceSum(data, count, dtype); });
}

absl::Status TimedCommunicator::AllGather(void* data, size_t count, DType dtype) {
  return Timed(seconds_, [&] { return inner_->AllGather(data, count, dtype); });
}

}  // namespace pagoda::worker
