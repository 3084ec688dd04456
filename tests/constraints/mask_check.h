#ifndef PAGODA_TESTS_CONSTRAINTS_MASK_CHECK_H_
#define PAGODA_TESTS_CONSTRAINTS_MASK_CHECK_H_

// Test helpers: the brute-force mask (for every token, does appending its
// bytes keep the text a valid prefix?) and random walks that compare it with
// Matcher::FillNextTokenMask.

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "scheduler/constraints/matcher.h"

namespace pagoda::constraints::testing {

inline bool MaskHas(const std::vector<uint32_t>& mask, int32_t id) {
  return (mask[id / 32] >> (id % 32)) & 1;
}

// For each token id, independently (no trie, no precomputed state): the
// matcher's stacks read the token's bytes one at a time; the token is
// allowed when the text is still a valid prefix after the last one.
inline std::vector<uint32_t> BruteForceMask(const Matcher& matcher) {
  const TokenVocabulary& vocabulary = matcher.grammar().vocabulary();
  std::vector<uint32_t> mask(vocabulary.mask_words(), 0);
  StackStepper stepper(matcher.grammar().automaton());
  FrameArena arena = matcher.arena();
  const int32_t arena_size = arena.size();
  StackSet current, next;
  for (int32_t id = 0; id < vocabulary.mask_size(); ++id) {
    const std::string_view bytes = vocabulary.BytesOfId(id);
    if (bytes.empty()) continue;
    current = matcher.stacks();
    bool ok = true;
    for (char c : bytes) {
      if (!stepper.Advance(current, static_cast<uint8_t>(c), arena, &next)) {
        ok = false;
        break;
      }
      std::swap(current, next);
    }
    arena.Truncate(arena_size);
    if (ok) mask[id / 32] |= uint32_t{1} << (id % 32);
  }
  return mask;
}

// Walks `steps` random tokens from `matcher`, comparing the fast mask with
// the brute-force one before each; stops early when only the end remains.
// Returns the text generated. `check_every` > 1 compares only every so many
// steps (the brute force is slow on large vocabularies).
inline std::string RandomWalk(Matcher matcher, std::mt19937_64& rng, int steps,
                              int check_every = 1, bool prefer_end = false) {
  const TokenVocabulary& vocabulary = matcher.grammar().vocabulary();
  std::string text;
  std::vector<uint32_t> mask(vocabulary.mask_words());
  for (int step = 0; step < steps; ++step) {
    matcher.FillNextTokenMask(absl::MakeSpan(mask));
    if (step % check_every == 0) {
      const std::vector<uint32_t> expected = BruteForceMask(matcher);
      for (int32_t id = 0; id < vocabulary.mask_size(); ++id) {
        if (MaskHas(mask, id) != MaskHas(expected, id)) {
          ADD_FAILURE() << "after \"" << text << "\": token " << id << " \""
                        << vocabulary.BytesOfId(id) << "\" fast " << MaskHas(mask, id)
                        << " brute force " << MaskHas(expected, id);
          return text;
        }
      }
    }
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocabulary.mask_size(); ++id) {
      if (MaskHas(mask, id)) allowed.push_back(id);
    }
    if (allowed.empty() || (prefer_end && matcher.CanEnd() && rng() % 4 == 0)) {
      EXPECT_TRUE(matcher.CanEnd()) << "dead end after \"" << text << "\"";
      return text;
    }
    const int32_t token = allowed[rng() % allowed.size()];
    EXPECT_TRUE(matcher.AcceptToken(token));
    text += vocabulary.BytesOfId(token);
  }
  return text;
}

}  // namespace pagoda::constraints::testing

#endif  // PAGODA_TESTS_CONSTRAINTS_MASK_CHECK_H_
