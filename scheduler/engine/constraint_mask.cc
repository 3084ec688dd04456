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
  if (id >= 0 && static_cast<size_t>(id) < mask.size() * 32) {
    mask[id / 32] |= uint32_t{1} << (id % 32);
  }
}

void ClearBit(std::vector<uint32_t>& mask, int32_t id) {
  if (id >= 0 && static_cast<size_t>(id) < mask.size() * 32) {
    mask[id / 32] &= ~(uint32_t{1} << (id % 32));
  }
}

// Advances the sequence's matcher over the output tokens it has not read.
void CatchUp(const SequenceGroup& group, Sequence& seq, absl::Span<const int32_t> eos_token_ids) {
  ConstraintState& state = seq.constraint_state();
  if (!state.matcher.has_value()) {
    state.matcher.emplace(group.sampling().grammar);
    state.tokens_read = 0;
    state.refused = false;
    state.waiting = group.sampling().grammar_after_token >= 0;
  }
  const std::vector<int32_t>& stops = group.stopping().stop_token_ids;
  for (; state.tokens_read < seq.num_output_tokens(); ++state.tokens_read) {
    const int32_t token = seq.output()[state.tokens_read].token_id;
    if (state.waiting) {
      state.waiting = token != group.sampling().grammar_after_token;
      continue;
    }
    if (state.refused || Contains(eos_token_ids, token) || Contains(stops, token)) continue;
    if (!state.matcher->AcceptToken(token)) {
      LOG(WARNING) << "request " << group.request_id() << ": output token " << token
                   << (state.matcher->refused_as_ambiguous()
                           ? " opens too many parses of its grammar"
                           : " breaks its constraint")
                   << "; only the end may follow";
      state.refused = true;
    }
  }
}

std::string Packed(const std::vector<uint32_t>& mask) {
  static_assert(std::endian::native == std::endian::little);
  return std::string(reinterpret_cast<const char*>(mask.data()), mask.size() * sizeof(uint32_t));
}

// While the grammar waits for its token: every token of the vocabulary but
// the bans (all of them when the bans would leave none).
std::string WaitingMask(const SequenceGroup& group, absl::Span<const int32_t> banned) {
  const constraints::TokenVocabulary& vocabulary = group.sampling().grammar->vocabulary();
  // Whole words set, then the last one cut at the vocabulary's end: a step
  // of every thinking sequence builds one.
  std::vector<uint32_t> all(vocabulary.mask_words(), ~uint32_t{0});
  if (const int tail = vocabulary.mask_size() % 32; tail != 0 && !all.empty()) {
    all.back() = (uint32_t{1} << tail) - 1;
  }
  std::vector<uint32_t> mask = all;
  for (int32_t id : banned) ClearBit(mask, id);
  const bool any = std::any_of(mask.begin(), mask.end(), [](uint32_t w) { return w != 0; });
  return Packed(any ? mask : all);
}

// The packed mask that follows `matcher` (NextTokenMask's rules; `refused`:
// the output broke the grammar, only the end may follow).
std::string MaskAfter(const SequenceGroup& group, constraints::Matcher& matcher, bool refused,
                      absl::Span<const int32_t> eos_token_ids, absl::Span<const int32_t> banned) {
  std::vector<uint32_t> mask(group.sampling().grammar->vocabulary().mask_words(), 0);
  if (!refused) matcher.FillNextTokenMask(absl::MakeSpan(mask));
  const bool any_text = std::any_of(mask.begin(), mask.end(), [](uint32_t w) { return w != 0; });
  if (refused || matcher.CanEnd() || !any_text) {
    if (!group.stopping().ignore_eos) {
      for (int32_t id : eos_token_ids) SetBit(mask, id);
    }
    for (int32_t id : group.stopping().stop_token_ids) SetBit(mask, id);
  }
  if (std::all_of(mask.begin(), mask.end(), [](uint32_t w) { return w == 0; })) {
    LOG(WARNING) << "request " << group.request_id() << ": its constraint allows no token";
    return "";
  }
  // The bans go only if they would leave no token: the grammar must be
  // able to finish.
  std::vector<uint32_t> unbanned = mask;
  for (int32_t id : banned) ClearBit(unbanned, id);
  if (std::any_of(unbanned.begin(), unbanned.end(), [](uint32_t w) { return w != 0; })) {
    mask.swap(unbanned);
  }
  return Packed(mask);
}

}  // namespace

bool IsConstrained(const SequenceGroup& group) { return group.sampling().grammar != nullptr; }

std::string NextTokenMask(const SequenceGroup& group, Sequence& seq,
                          absl::Span<const int32_t> eos_token_ids,
                          absl::Span<const int32_t> banned) {
  CatchUp(group, seq, eos_token_ids);
  ConstraintState& state = seq.constraint_state();
  if (state.waiting) return WaitingMask(group, banned);
  return MaskAfter(group, *state.matcher, state.refused, eos_token_ids, banned);
}

int GrammarValidDrafts(const SequenceGroup& group, Sequence& seq,
                       absl::Span<const int32_t> eos_token_ids, absl::Span<const int32_t> drafts) {
  CatchUp(group, seq, eos_token_ids);
  const ConstraintState& state = seq.constraint_state();
  if (state.refused) return 0;
  const std::vector<int32_t>& stops = group.stopping().stop_token_ids;
  constraints::Matcher matcher = *state.matcher;
  bool waiting = state.waiting;
  int valid = 0;
  for (int32_t draft : drafts) {
    if (Contains(eos_token_ids, draft) || Contains(stops, draft)) break;
    if (waiting) {
      waiting = draft != group.sampling().grammar_after_token;
    } else if (!matcher.AcceptToken(draft)) {
      break;
    }
    ++valid;
  }
  return valid;
}

std::vector<std::string> NextTokenMasks(const SequenceGroup& group, Sequence& seq,
                                        absl::Span<const int32_t> drafts,
                                        absl::Span<const int32_t> eos_token_ids,
                                        absl::Span<const int32_t> banned) {
  std::vector<std::string> masks;
  masks.reserve(drafts.size() + 1);
  masks.push_back(NextTokenMask(group, seq, eos_token_ids, banned));
  const ConstraintState& state = seq.constraint_state();
  constraints::Matcher matcher = *state.matcher;
  bool refused = state.refused;
  bool waiting = state.waiting;
  for (int32_t draft : drafts) {
    if (waiting) {
      waiting = draft != group.sampling().grammar_after_token;
      masks.push_back(waiting ? masks.back()
                              : MaskAfter(group, matcher, refused, eos_token_ids, banned));
      continue;
    }
    refused = refused || !matcher.AcceptToken(draft);
    masks.push_back(refused ? masks.back()
                            : MaskAfter(group, matcher, false, eos_token_ids, banned));
  }
  return masks;
}

}  // namespace pagoda::scheduler
