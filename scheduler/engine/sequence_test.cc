#include "scheduler/engine/sequence.h"

#include <memory>
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gtest/gtest.h"

namespace pagoda::scheduler {
namespace {

absl::flat_hash_map<int32_t, int32_t> CountOutput(const Sequence& seq) {
  absl::flat_hash_map<int32_t, int32_t> counts;
  for (const GeneratedToken& token : seq.output()) ++counts[token.token_id];
  return counts;
}

// The counts are taken on demand: reads between appends, at random points,
// and through forks must each see exactly the output so far.
TEST(SequenceTest, OutputTokenCountsFollowAppendsReadsAndForks) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> token(0, 9);
  SequenceGroup group("r", {5, 6, 5}, /*first_seq_id=*/1, SamplingOptions{}, StoppingOptions{},
                      absl::Now());
  const std::vector<std::unique_ptr<Sequence>>& seqs = group.seqs();
  for (int step = 0; step < 400; ++step) {
    // The first sequence half the time, else one of its forks (or theirs).
    Sequence* seq = seqs.size() == 1 || rng() % 2 == 0 ? seqs[0].get()
                                                       : seqs[1 + rng() % (seqs.size() - 1)].get();
    seq->AppendToken(GeneratedToken{token(rng), -0.5f, {}});
    if (rng() % 3 == 0) {
      ASSERT_EQ(seq->output_token_counts(), CountOutput(*seq)) << step;
    }
    if (rng() % 50 == 0) group.AddForkedSequence(*seq, 100 + step);
  }
  for (const auto& seq : seqs) EXPECT_EQ(seq->output_token_counts(), CountOutput(*seq));
  EXPECT_GT(seqs.size(), 1u);
  // The prompt is not output.
  Sequence fresh(2, {1, 1, 1});
  EXPECT_TRUE(fresh.output_token_counts().empty());
}

// The adapter keys the prefix cache (KvSequence::lora_id): every sequence
// of the group carries it, forks included.
TEST(SequenceTest, EverySequenceOfAGroupCarriesItsAdapter) {
  SequenceGroup group("r", {1, 2, 3}, /*first_seq_id=*/7, SamplingOptions{}, StoppingOptions{},
                      absl::Now());
  EXPECT_EQ(group.seqs()[0]->lora_id(), 0);
  group.set_lora_id(5);
  EXPECT_EQ(group.lora_id(), 5);
  const KvSequence& as_kv = *group.seqs()[0];
  EXPECT_EQ(as_kv.lora_id(), 5);
  EXPECT_EQ(group.AddForkedSequence(*group.seqs()[0], 8)->lora_id(), 5);
}

// Chunks may come back twice (a recomputed chunk), out of reach (past the
// prompt) or after a gap (a chunk lost with a failed step): the store keeps
// each position once, in order, and hands each entry out once.
TEST(PromptLogprobStoreTest, KeepsEachPromptPositionOnceInOrder) {
  const auto entries = [](std::vector<int32_t> ids) {
    std::vector<GeneratedToken> tokens;
    for (int32_t id : ids) tokens.push_back(GeneratedToken{id, -1.0f, {}});
    return tokens;
  };
  const auto ids = [](const std::vector<GeneratedToken>& tokens) {
    std::vector<int32_t> out;
    for (const GeneratedToken& token : tokens) out.push_back(token.token_id);
    return out;
  };
  PromptLogprobStore store(/*num_prompt_tokens=*/6);
  store.Add(1, entries({11, 12}));
  store.Add(4, entries({14}));  // A gap: position 3 is missing.
  EXPECT_EQ(store.num_stored(), 2);
  EXPECT_EQ(ids(store.TakeNew()), (std::vector<int32_t>{11, 12}));
  store.Add(2, entries({92, 13, 14, 15, 16}));  // 2 again; 6 is past the prompt.
  EXPECT_EQ(store.num_stored(), 5);
  EXPECT_EQ(ids(store.TakeNew()), (std::vector<int32_t>{13, 14, 15}));
  EXPECT_TRUE(store.TakeNew().empty());
}

}  // namespace
}  // namespace pagoda::scheduler
