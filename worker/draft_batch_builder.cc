#include "worker/draft_batch_builder.h"

#include <utility>

namespace pagoda::worker {

DraftBatchBuilder::DraftBatchBuilder(const FlatBatch& verify) : verify_(verify) {
  batch_.max_blocks_per_seq = verify.max_blocks_per_seq;
  batch_.query_start = {0};
}

void DraftBatchBuilder::AddSequence(int seq, int first, int end, int32_t input, bool wants_logits,
                                    int sampling_row) {
  for (int row = first; row < end; ++row) {
    batch_.input_ids.push_back(row == first && input >= 0 ? input : verify_.input_ids[row]);
    batch_.positions.push_back(verify_.positions[row]);
    batch_.slot_mapping.push_back(verify_.slot_mapping[row]);
    batch_.lora_slots.push_back(0);
  }
  EndSequence(seq, verify_.positions[end - 1], wants_logits, sampling_row);
}

void DraftBatchBuilder::AddRows(int seq, int first_position, absl::Span<const int32_t> tokens,
                                bool wants_logits, int block_size, int sampling_row) {
  const int32_t* table =
      verify_.block_tables.data() + static_cast<ptrdiff_t>(seq) * verify_.max_blocks_per_seq;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int position = first_position + static_cast<int>(i);
    batch_.input_ids.push_back(tokens[i]);
    batch_.positions.push_back(position);
    batch_.slot_mapping.push_back(table[position / block_size] * block_size +
                                  position % block_size);
    batch_.lora_slots.push_back(0);
  }
  EndSequence(seq, first_position + static_cast<int>(tokens.size()) - 1, wants_logits,
              sampling_row);
}

std::vector<int> DraftBatchBuilder::FirstLogitsRows(const FlatBatch& verify) {
  std::vector<int> first(verify.num_seqs(), -1);
  for (int r = verify.num_logits_rows() - 1; r >= 0; --r) first[verify.sample_sequences[r]] = r;
  return first;
}

FlatBatch DraftBatchBuilder::Take() { return std::move(batch_); }

void DraftBatchBuilder::EndSequence(int seq, int last_position, bool wants_logits,
                                    int sampling_row) {
  batch_.query_start.push_back(batch_.num_tokens());
  batch_.context_lens.push_back(last_position + 1);
  const auto table =
      verify_.block_tables.begin() + static_cast<ptrdiff_t>(seq) * verify_.max_blocks_per_seq;
  batch_.block_tables.insert(batch_.block_tables.end(), table, table + verify_.max_blocks_per_seq);
  if (wants_logits) AddLogitsRow(batch_.num_tokens() - 1, sampling_row);
}

void DraftBatchBuilder::AddLogitsRow(int row, int sampling_row) {
  const bool coupled = sampling_row >= 0;
  batch_.logits_indices.push_back(row);
  batch_.sample_sequences.push_back(batch_.num_seqs() - 1);
  batch_.temperatures.push_back(coupled ? verify_.temperatures[sampling_row] : 0.0f);
  batch_.top_k.push_back(coupled ? verify_.top_k[sampling_row] : 0);
  batch_.top_p.push_back(coupled ? verify_.top_p[sampling_row] : 1.0f);
  batch_.seeds.push_back(coupled ? verify_.seeds[sampling_row] : 0);
  batch_.sample_indices.push_back(coupled ? verify_.sample_indices[sampling_row] : 0);
  batch_.num_logprobs.push_back(0);
  batch_.min_p.push_back(coupled ? verify_.min_p[sampling_row] : 0.0f);
  batch_.penalties.push_back(LogitPenalties{});
  batch_.edit_offsets.push_back(0);
  batch_.mask_offsets.push_back(-1);
  batch_.processed_logprobs.push_back(0);
}

}  // namespace pagoda::worker
