#include "worker/step_batch_upload.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace pagoda::worker {
namespace {

size_t AlignUp(size_t bytes) {
  return (bytes + Workspace::kAlignment - 1) / Workspace::kAlignment * Workspace::kAlignment;
}

// Byte offsets of the arrays inside the one region: the same in the host
// staging buffer and in the workspace, so one copy moves them all.
struct Layout {
  size_t token_ids, positions, slot_mapping, query_start, context_lens, block_tables,
      logits_indices, temperatures, top_k, top_p, seeds, sample_indices, min_p, penalties,
      edit_offsets, edits, mask_offsets, token_masks, processed_logprobs, total;
};

Layout LayoutFor(const StepBatchCapacity& c) {
  const size_t tokens = static_cast<size_t>(c.tokens);
  const size_t seqs = static_cast<size_t>(c.seqs);
  const size_t rows = static_cast<size_t>(c.logits_rows);
  Layout layout{};
  size_t offset = 0;
  auto place = [&offset](size_t bytes) {
    const size_t at = offset;
    offset += AlignUp(bytes);
    return at;
  };
  layout.token_ids = place(tokens * sizeof(int32_t));
  layout.positions = place(tokens * sizeof(int64_t));
  layout.slot_mapping = place(tokens * sizeof(int64_t));
  layout.query_start = place((seqs + 1) * sizeof(int32_t));
  layout.context_lens = place(seqs * sizeof(int32_t));
  layout.block_tables = place(seqs * static_cast<size_t>(c.blocks_per_seq) * sizeof(int32_t));
  layout.logits_indices = place(rows * sizeof(int32_t));
  layout.temperatures = place(rows * sizeof(float));
  layout.top_k = place(rows * sizeof(int32_t));
  layout.top_p = place(rows * sizeof(float));
  layout.seeds = place(rows * sizeof(uint64_t));
  layout.sample_indices = place(rows * sizeof(uint64_t));
  layout.min_p = place(rows * sizeof(float));
  layout.penalties = place(rows * sizeof(LogitPenalties));
  layout.edit_offsets = place((rows + 1) * sizeof(int32_t));
  layout.edits = place(static_cast<size_t>(c.edits) * sizeof(LogitEdit));
  layout.mask_offsets = place(rows * sizeof(int32_t));
  layout.token_masks = place(static_cast<size_t>(c.mask_words) * sizeof(uint32_t));
  layout.processed_logprobs = place(rows * sizeof(uint8_t));
  layout.total = offset;
  return layout;
}

template <typename T, typename Source>
void Pack(char* staging, size_t offset, const std::vector<Source>& values) {
  T* dst = reinterpret_cast<T*>(staging + offset);
  for (size_t i = 0; i < values.size(); ++i) dst[i] = static_cast<T>(values[i]);
}

// The sampling arrays of the region at `device`.
SamplingBatch DescribeSampling(const Layout& layout, char* device, const FlatBatch& batch) {
  SamplingBatch out;
  auto at = [device](size_t offset) { return device + offset; };
  out.num_rows = batch.num_logits_rows();
  out.temperatures = reinterpret_cast<const float*>(at(layout.temperatures));
  out.top_k = reinterpret_cast<const int32_t*>(at(layout.top_k));
  out.top_p = reinterpret_cast<const float*>(at(layout.top_p));
  out.seeds = reinterpret_cast<const uint64_t*>(at(layout.seeds));
  out.sample_indices = reinterpret_cast<const uint64_t*>(at(layout.sample_indices));
  out.min_p = reinterpret_cast<const float*>(at(layout.min_p));
  out.penalties = reinterpret_cast<const LogitPenalties*>(at(layout.penalties));
  out.edit_offsets = reinterpret_cast<const int32_t*>(at(layout.edit_offsets));
  out.edits = reinterpret_cast<const LogitEdit*>(at(layout.edits));
  if (std::find(batch.processed_logprobs.begin(), batch.processed_logprobs.end(), 1) !=
      batch.processed_logprobs.end()) {
    out.processed_logprobs = reinterpret_cast<const uint8_t*>(at(layout.processed_logprobs));
  }
  out.has_edits = !batch.edits.empty() || !batch.token_masks.empty();
  for (const LogitPenalties& penalties : batch.penalties) {
    out.has_edits = out.has_edits || penalties.allowed_only;
  }
  if (!batch.token_masks.empty()) {
    out.mask_offsets = reinterpret_cast<const int32_t*>(at(layout.mask_offsets));
    out.token_masks = reinterpret_cast<const uint32_t*>(at(layout.token_masks));
  }
  for (int32_t n : batch.num_logprobs) out.num_logprobs = std::max(out.num_logprobs, n);
  return out;
}

}  // namespace

size_t StepBatchUploader::RegionBytes(const StepBatchCapacity& capacity) {
  return LayoutFor(capacity).total;
}

StepBatchCapacity StepBatchUploader::CapacityOf(const FlatBatch& batch) {
  return StepBatchCapacity{.tokens = batch.num_tokens(),
                           .seqs = batch.num_seqs(),
                           .blocks_per_seq = batch.max_blocks_per_seq,
                           .logits_rows = batch.num_logits_rows(),
                           .edits = static_cast<int>(batch.edits.size()),
                           .mask_words = static_cast<int>(batch.token_masks.size())};
}

void StepBatchUploader::Reserve(const StepBatchCapacity& capacity) {
  const size_t bytes = RegionBytes(capacity);
  if (staging_ != nullptr && staging_->nbytes() >= bytes) return;
  staging_.reset();
  staging_ = backend_->AllocateHost(DType::kF32, (bytes + sizeof(float) - 1) / sizeof(float));
}

StepBatch StepBatchUploader::Upload(const FlatBatch& batch, Workspace* workspace) {
  const StepBatchCapacity capacity = CapacityOf(batch);
  const Layout layout = LayoutFor(capacity);
  Reserve(capacity);
  char* staging = static_cast<char*>(staging_->raw());
  Pack<int32_t>(staging, layout.token_ids, batch.input_ids);
  Pack<int64_t>(staging, layout.positions, batch.positions);
  Pack<int64_t>(staging, layout.slot_mapping, batch.slot_mapping);
  Pack<int32_t>(staging, layout.query_start, batch.query_start);
  Pack<int32_t>(staging, layout.context_lens, batch.context_lens);
  Pack<int32_t>(staging, layout.block_tables, batch.block_tables);
  Pack<int32_t>(staging, layout.logits_indices, batch.logits_indices);
  Pack<float>(staging, layout.temperatures, batch.temperatures);
  Pack<int32_t>(staging, layout.top_k, batch.top_k);
  Pack<float>(staging, layout.top_p, batch.top_p);
  Pack<uint64_t>(staging, layout.seeds, batch.seeds);
  Pack<uint64_t>(staging, layout.sample_indices, batch.sample_indices);
  Pack<float>(staging, layout.min_p, batch.min_p);
  Pack<LogitPenalties>(staging, layout.penalties, batch.penalties);
  Pack<int32_t>(staging, layout.edit_offsets, batch.edit_offsets);
  Pack<LogitEdit>(staging, layout.edits, batch.edits);
  Pack<int32_t>(staging, layout.mask_offsets, batch.mask_offsets);
  Pack<uint32_t>(staging, layout.token_masks, batch.token_masks);
  Pack<uint8_t>(staging, layout.processed_logprobs, batch.processed_logprobs);

  char* device = static_cast<char*>(workspace->Take(layout.total));
  backend_->UploadBytes(staging, device, layout.total);

  StepBatch out;
  auto at = [device](size_t offset) { return device + offset; };
  out.token_ids = reinterpret_cast<const int32_t*>(at(layout.token_ids));
  out.positions = reinterpret_cast<const int64_t*>(at(layout.positions));
  out.slot_mapping = reinterpret_cast<const int64_t*>(at(layout.slot_mapping));
  out.query_start = reinterpret_cast<const int32_t*>(at(layout.query_start));
  out.context_lens = reinterpret_cast<const int32_t*>(at(layout.context_lens));
  out.block_tables = reinterpret_cast<const int32_t*>(at(layout.block_tables));
  out.logits_indices = reinterpret_cast<const int32_t*>(at(layout.logits_indices));
  out.sampling = DescribeSampling(layout, device, batch);

  out.num_tokens = capacity.tokens;
  out.num_seqs = capacity.seqs;
  out.num_logits_rows = capacity.logits_rows;
  out.max_blocks_per_seq = capacity.blocks_per_seq;
  out.decode_only = capacity.seqs > 0;
  for (int s = 0; s < capacity.seqs; ++s) {
    const int query_len = batch.query_start[s + 1] - batch.query_start[s];
    out.max_query_len = std::max(out.max_query_len, query_len);
    out.max_context_len = std::max(out.max_context_len, batch.context_lens[s]);
    if (query_len != 1) out.decode_only = false;
  }
  return out;
}

void StepBatchUploader::UploadTokenMasks(const FlatBatch& batch, const SamplingBatch& sampling) {
  if (batch.token_masks.empty() || sampling.mask_offsets == nullptr) return;
  const Layout layout = LayoutFor(CapacityOf(batch));
  char* staging = static_cast<char*>(staging_->raw());
  Pack<int32_t>(staging, layout.mask_offsets, batch.mask_offsets);
  Pack<uint32_t>(staging, layout.token_masks, batch.token_masks);
  backend_->UploadBytes(staging + layout.mask_offsets, const_cast<int32_t*>(sampling.mask_offsets),
                        batch.mask_offsets.size() * sizeof(int32_t));
  backend_->UploadBytes(staging + layout.token_masks, const_cast<uint32_t*>(sampling.token_masks),
                        batch.token_masks.size() * sizeof(uint32_t));
}

}  // namespace pagoda::worker
