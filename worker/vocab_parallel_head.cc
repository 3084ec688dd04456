#include "worker/vocab_parallel_head.h"

#include <utility>

namespace pagoda::worker {

absl::StatusOr<std::unique_ptr<VocabParallelHead>> VocabParallelHead::Load(
    const Source& source, int64_t vocab, int64_t hidden, Backend* backend,
    Communicator* communicator) {
  const int world = source.whole_on_rank0 ? 1 : communicator->world_size();
  // vLLM refuses a split its padded vocabulary cannot divide evenly; so do
  // we (an EAGLE-3 head's draft vocabulary is checked here, at load).
  if (absl::Status s = CheckVocabParallelSplit(vocab, world, source.vocab_key); !s.ok()) return s;
  const bool holds = !source.whole_on_rank0 || communicator->rank() == 0;
  const IndexRange range =
      holds ? VocabParallelRange(vocab, communicator->rank() % world, world) : IndexRange{};
  std::unique_ptr<Linear> local;
  if (source.tied != nullptr) {
    if (range.size() > 0) {
      local = std::make_unique<DenseLinear>(
          backend, Tensor::Of(*source.tied, {vocab, hidden}).Rows(range.begin, range.size()),
          DType::kF32);
    }
  } else if (range.size() > 0) {
    absl::StatusOr<std::unique_ptr<Linear>> rows = source.loader->LoadLinear(
        {{source.name, vocab, hidden, WeightSlice::Rows(range.begin, range.end)}}, false,
        DType::kF32);
    if (!rows.ok()) return rows.status();
    local = *std::move(rows);
  }
  return std::unique_ptr<VocabParallelHead>(
      new VocabParallelHead(backend, communicator, vocab, world > 1, std::move(local)));
}

VocabParallelHead::VocabParallelHead(Backend* backend, Communicator* communicator, int64_t vocab,
                                     bool split, std::unique_ptr<Linear> local)
    : backend_(backend),
      communicator_(communicator),
      vocab_(vocab),
      split_(split),
      rows_per_rank_(VocabParallelRowsPerRank(vocab, communicator->world_size())),
      range_(split ? VocabParallelRange(vocab, communicator->rank(), communicator->world_size())
                   : IndexRange{0, local ? vocab : 0}),
      local_(std::move(local)) {}

void VocabParallelHead::ReserveGather(int rows) {
  const size_t floats =
      static_cast<size_t>(communicator_->world_size()) * rows * static_cast<size_t>(rows_per_rank_);
  if (gathered_ != nullptr && gathered_->size() >= floats) return;
  gathered_.reset();  // Free before allocating the bigger one.
  gathered_ = backend_->Allocate(DType::kF32, floats);
}

absl::Status VocabParallelHead::Forward(const void* hidden, int rows, float* logits) {
  if (!split_) {
    if (local_ != nullptr) local_->Forward(hidden, rows, logits);
    return absl::OkStatus();
  }
  if (rows == 0) return absl::OkStatus();
  ReserveGather(rows);
  // Each part is [rows, its rank's range] packed: the padding rows are
  // never computed, only their room moved.
  const size_t part = static_cast<size_t>(rows) * rows_per_rank_;
  float* gathered = gathered_->data();
  if (local_ != nullptr) local_->Forward(hidden, rows, gathered + communicator_->rank() * part);
  if (absl::Status s = communicator_->AllGather(gathered, part, DType::kF32); !s.ok()) return s;
  if (communicator_->rank() != 0) return absl::OkStatus();
  for (int r = 0; r < communicator_->world_size(); ++r) {
    const IndexRange range = VocabParallelRange(vocab_, r, communicator_->world_size());
    if (range.size() == 0) continue;
    const size_t row_bytes = static_cast<size_t>(range.size()) * sizeof(float);
    backend_->CopyRows(gathered + r * part, row_bytes, logits + range.begin,
                       static_cast<size_t>(vocab_) * sizeof(float), row_bytes, rows);
  }
  return absl::OkStatus();
}

}  // namespace pagoda::worker
