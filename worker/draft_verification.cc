#include "worker/draft_verification.h"

#include "absl/container/flat_hash_map.h"
#include "worker/logits_edits.h"

namespace pagoda::worker {

using pagoda::worker::v1::SamplingOptions;

SamplingOptions VerifyRowOptions(const SamplingOptions& options,
                                 absl::Span<const int32_t> earlier_drafts) {
  const LogitPenalties penalties = PenaltiesOf(options);
  const bool reads_output =
      penalties.repetition != 1.0f || penalties.frequency != 0 || penalties.presence != 0;
  if (!reads_output || earlier_drafts.empty()) return options;
  // The output counts are distinct ids with counts: add the drafts to them,
  // keeping each id once.
  absl::flat_hash_map<int32_t, int> index_of;
  SamplingOptions row = options;
  for (int i = 0; i < row.output_token_ids_size(); ++i) index_of[row.output_token_ids(i)] = i;
  for (int32_t draft : earlier_drafts) {
    auto [it, inserted] = index_of.try_emplace(draft, row.output_token_ids_size());
    if (inserted) {
      row.add_output_token_ids(draft);
      row.add_output_token_counts(1);
    } else {
      row.set_output_token_counts(it->second, row.output_token_counts(it->second) + 1);
    }
  }
  return row;
}

int CountAcceptedDrafts(absl::Span<const int32_t> drafts, absl::Span<const int32_t> sampled) {
  int accepted = 0;
  while (accepted < static_cast<int>(drafts.size()) && sampled[accepted] == drafts[accepted]) {
    ++accepted;
  }
  return accepted;
}

}  // namespace pagoda::worker
