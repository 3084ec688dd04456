#include "scheduler/engine/constraint_mask.h"

#include <algorithm>
#include <bit>
#include <string>
#include <vector>

#include "glog/logging.h"

namespace pagoda::scheduler {
namespace {

bool Contains(absl::Span<const int32_t> ids, int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

void SetBit(std::vector<uint32_t>& mask, int32_t id) {
  if (id >= 0 && static_cast<size_t>(id) < mask.size() * 32) mask[id / 32] |= uint32_t{1} << (id % 32);
}

// Advances the sequence's matcher over the output tokens it has not read.
void CatchUp(const SequenceGroup& group, Sequence& seq, absl::Span<const int32_t> eos_token_ids) {
  Sequence::ConstraintState& state = seq.constraint_state();
  if (!state.matcher.has_value()) {
    state.matcher.emplace(group.sampling().grammar);
    state.tokens_read = 0;
    state.refused = false;
  }
  const std::vector<int32_t>& stops = group.stopping().stop_token_ids;
  for (; state.tokens_read < seq.num_output_tokens(); ++state.tokens_read) {
    const int32_t token = seq.output()[state.tokens_read].token_id;
    if (state.refused || Contains(eos_token_ids, token) || Contains(stops, token)) continue;
    if (!state.matcher->AcceptToken(token)) {
      LOG(WARNING) << "request " << group.request_id() << ": output token " << token
                   << " breaks its constraint; only the end may follow";
      state.refused = true;
    }
  }
}

}  // namespace

void SetTokenMask(const SequenceGroup& group, Sequence& seq, absl::Span<const int32_t> eos_token_ids,
                  pagoda::worker::v1::SamplingOptions* options) {
  if (group.sampling().grammar == nullptr) return;
  CatchUp(group, seq, eos_token_ids);
  Sequence::ConstraintState& state = seq.constraint_state();
  std::vector<uint32_t> mask(group.sampling().grammar->vocabulary().mask_words(), 0);
  if (!state.refused) state.matcher->FillNextTokenMask(absl::MakeSpan(mask));
  const bool any_text = std::any_of(mask.begin(), mask.end(), [](uint32_t w) { return w != 0; });
  if (state.refused || state.matcher->CanEnd() || !any_text) {
    if (!group.stopping().ignore_eos) {
      for (int32_t id : eos_token_ids) SetBit(mask, id);
    }
    for (int32_t id : group.stopping().stop_token_ids) SetBit(mask, id);
  }
  // Bans that would leave no token go: the grammar must be able to finish.
  bool allowed_left = false;
  for (size_t w = 0; w < mask.size() && !allowed_left; ++w) {
    uint32_t word = mask[w];
    for (int32_t id : options->banned_token_ids()) {
      if (static_cast<size_t>(id / 32) == w) word &= ~(uint32_t{1} << (id % 32));
    }
    allowed_left = word != 0;
  }
  if (!allowed_left) options->clear_banned_token_ids();
  if (std::all_of(mask.begin(), mask.end(), [](uint32_t w) { return w == 0; })) {
    // Nothing at all (a model without an EOS token at a dead end): draw
    // unconstrained rather than refuse the step.
    LOG(WARNING) << "request " << group.request_id() << ": its constraint allows no token";
    return;
  }
  static_assert(std::endian::native == std::endian::little);
  options->set_token_mask(
      std::string(reinterpret_cast<const char*>(mask.data()), mask.size() * sizeof(uint32_t)));
}

}  // namespace pagoda::scheduler
