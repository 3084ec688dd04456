#ifndef PAGODA_WORKER_COMMUNICATOR_H_
#define PAGODA_WORKER_COMMUNICATOR_H_

#include <cstddef>
#include <memory>

namespace pagoda::worker {

// The tensor-parallel seam. Each rank holds a slice of the attention heads
// and of the MLP's intermediate dimension; the model calls AllReduceSum after
// the attention output projection and after the MLP down projection
// (Megatron-style), so every rank ends each layer with the full hidden state.
// `data` is backend memory. Every rank must make the same sequence of calls.
// Thread safety: one caller at a time.
class Communicator {
 public:
  virtual ~Communicator() = default;
  // In place: data[i] = sum over ranks of data[i].
  virtual void AllReduceSum(float* data, size_t n) = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
};

// World of one: AllReduceSum leaves data as it is.
std::unique_ptr<Communicator> CreateSingleRankCommunicator();

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_COMMUNICATOR_H_
