#ifndef PAGODA_WORKER_COMMUNICATOR_H_
#define PAGODA_WORKER_COMMUNICATOR_H_

// The model's tensor-parallel seam: the communicator its layers all-reduce
// through, and TimedCommunicator, which measures the time spent there.

#include <atomic>
#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "common/dtype.h"
#include "worker/comm/collective_communicator.h"

namespace pagoda::worker {

// The tensor-parallel seam of the model. Each rank holds a slice of the
// attention heads and of the MLP's intermediate dimension; the model calls
// AllReduceSum after the attention output projection and after the MLP down
// projection (Megatron-style), so every rank ends each layer with the full
// hidden state. The typed CollectiveCommunicator (worker/comm/) is the seam:
// pointers are backend memory, the dtype is the activations', and a failed
// collective comes back as a status the model returns from Forward.
using Communicator = comm::CollectiveCommunicator;

// World of one: collectives leave data as it is and never fail (until Abort).
std::unique_ptr<Communicator> CreateSingleRankCommunicator();

// Forwards to `inner` and adds up the wall time spent in collectives, so a
// worker can report the share of a step spent communicating. Thread safety:
// as the inner communicator; TakeSeconds from any thread.
class TimedCommunicator final : public Communicator {
 public:
  // `inner` must outlive this object.
  explicit TimedCommunicator(Communicator* inner) : inner_(inner) {}

  absl::Status AllReduceSum(void* data, size_t count, DType dtype) override;
  absl::Status AllGather(void* data, size_t count, DType dtype) override;
  void Abort() override { inner_->Abort(); }
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }

  // Seconds spent in collectives since the last call; resets the sum.
  double TakeSeconds() { return seconds_.exchange(0.0); }

 private:
  Communicator* inner_;
  std::atomic<double> seconds_{0.0};
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_COMMUNICATOR_H_
