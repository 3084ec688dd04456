#include "scheduler/kv/block_manager.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"
#include "scheduler/engine/sequence.h"
#include "tests/support/kv_event_list.h"

namespace pagoda::scheduler {
namespace {

std::unique_ptr<SequenceGroup> MakeGroup(int64_t seq_id, int prompt_len, int32_t first_token = 1) {
  std::vector<int32_t> prompt(prompt_len);
  std::iota(prompt.begin(), prompt.end(), first_token);
  return std::make_unique<SequenceGroup>("req" + std::to_string(seq_id), std::move(prompt), seq_id,
                                         SamplingOptions{}, StoppingOptions{}, absl::Now());
}

void SetStatus(SequenceGroup& group, SequenceStatus from, SequenceStatus to) {
  for (Sequence* seq : group.SeqsWithStatus(from)) seq->set_status(to);
}

// Allocates the group's prompt and marks it running.
void AllocateRunning(BlockManager& manager, SequenceGroup& group) {
  ASSERT_TRUE(manager.Allocate(group).ok());
  SetStatus(group, SequenceStatus::kWaiting, SequenceStatus::kRunning);
}

using Moves = std::vector<std::pair<int, int>>;
Moves ToPairs(const std::vector<BlockMove>& moves) {
  Moves pairs;
  for (const BlockMove& move : moves) pairs.emplace_back(move.src, move.dst);
  return pairs;
}

TEST(BlockManagerTest, Scenario1WatermarkDecidesOkLaterNever) {
  BlockManager manager(/*block_size=*/16, /*num_gpu_blocks=*/100, /*num_cpu_blocks=*/0, 0.01);
  EXPECT_EQ(manager.watermark_blocks(), 1);
  EXPECT_EQ(manager.CanAllocate(*MakeGroup(1, 1584)), AllocStatus::kOk);
  EXPECT_EQ(manager.CanAllocate(*MakeGroup(2, 1585)), AllocStatus::kNever);
  auto first = MakeGroup(3, 800);
  AllocateRunning(manager, *first);
  EXPECT_EQ(manager.num_free_gpu_blocks(), 50);
  EXPECT_EQ(manager.CanAllocate(*MakeGroup(4, 784)), AllocStatus::kOk);
  EXPECT_EQ(manager.CanAllocate(*MakeGroup(5, 785)), AllocStatus::kLater);
}

// Speculative decoding's draft slots: the table covers length + lookahead,
// copy-on-write still applies to the block the new token lands in, and a
// sequence whose slots do not fit is refused before anything changes.
TEST(BlockManagerTest, LookaheadSlotsAreReservedWithTheNewToken) {
  BlockManager manager(/*block_size=*/4, /*num_gpu_blocks=*/4, /*num_cpu_blocks=*/0, 0.0);
  auto group = MakeGroup(1, 3);
  AllocateRunning(manager, *group);
  Sequence& parent = *group->seqs()[0];
  Sequence* child = group->AddForkedSequence(parent, 2);
  manager.Fork(parent, *child);
  child->AppendToken({7, 0.0f, {}});  // Length 4: the token lands in shared block 0.
  child->set_num_lookahead_slots(2);  // Slots 4 and 5: one new block.
  auto copy = manager.AppendSlots(*child);
  ASSERT_TRUE(copy.ok());
  ASSERT_TRUE(copy->has_value());
  EXPECT_EQ((*copy)->src, 0);
  const std::vector<int> table = manager.GetBlockTable(2);
  ASSERT_EQ(table.size(), 2u);
  EXPECT_EQ(table[0], (*copy)->dst);
  EXPECT_EQ(manager.GetBlockTable(1), std::vector<int>({0}));
  EXPECT_EQ(manager.num_free_gpu_blocks(), 1);

  // The parent's next token needs no block, but 6 lookahead slots need two.
  parent.AppendToken({8, 0.0f, {}});
  parent.set_num_lookahead_slots(6);
  child->set_status(SequenceStatus::kFinishedStopped);
  EXPECT_FALSE(manager.CanAppendSlots(*group));
  auto refused = manager.AppendSlots(parent);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(manager.GetBlockTable(1), std::vector<int>({0}));
  parent.set_num_lookahead_slots(4);  // Slots 4..7: one block.
  EXPECT_TRUE(manager.CanAppendSlots(*group));
  ASSERT_TRUE(manager.AppendSlots(parent).ok());
  EXPECT_EQ(manager.GetBlockTable(1).size(), 2u);
  EXPECT_EQ(manager.num_free_gpu_blocks(), 0);
}

TEST(BlockManagerTest, Scenario2ForkThenCopyOnWriteOfSharedLastBlock) {
  BlockManager manager(/*block_size=*/4, /*num_gpu_blocks=*/4, /*num_cpu_blocks=*/0, 0.0);
  auto group = MakeGroup(1, 3);
  AllocateRunning(manager, *group);
  Sequence& parent = *group->seqs()[0];
  EXPECT_EQ(manager.GetBlockTable(1), std::vector<int>({0}));
  EXPECT_EQ(manager.num_free_gpu_blocks(), 3);

  Sequence* child = group->AddForkedSequence(parent, 2);
  manager.Fork(parent, *child);
  EXPECT_EQ(manager.GetBlockTable(1), std::vector<int>({0}));
  EXPECT_EQ(manager.GetBlockTable(2), std::vector<int>({0}));
  EXPECT_EQ(manager.gpu_pool().ref_count(0), 2);
  EXPECT_EQ(manager.num_free_gpu_blocks(), 3);

  child->AppendToken({7, 0.0f, {}});
  auto child_copy = manager.AppendSlots(*child);
  ASSERT_TRUE(child_copy.ok());
  ASSERT_TRUE(child_copy->has_value());
  EXPECT_EQ((*child_copy)->src, 0);
  EXPECT_EQ((*child_copy)->dst, 1);
  EXPECT_EQ(manager.GetBlockTable(2), std::vector<int>({1}));
  EXPECT_EQ(manager.num_free_gpu_blocks(), 2);

  parent.AppendToken({8, 0.0f, {}});
  auto parent_copy = manager.AppendSlots(parent);
  ASSERT_TRUE(parent_copy.ok());
  EXPECT_FALSE(parent_copy->has_value());
  EXPECT_EQ(manager.GetBlockTable(1), std::vector<int>({0}));
  EXPECT_EQ(manager.num_free_gpu_blocks(), 2);
}

TEST(BlockManagerTest, Scenario3SwapOutAndBackIn) {
  BlockManager manager(/*block_size=*/8, /*num_gpu_blocks=*/4, /*num_cpu_blocks=*/4, 0.0);
  auto group = MakeGroup(1, 7);
  AllocateRunning(manager, *group);
  ASSERT_TRUE(manager.CanSwapOut(*group));
  auto out = manager.SwapOut(*group);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(ToPairs(*out), Moves({{0, 0}}));
  SetStatus(*group, SequenceStatus::kRunning, SequenceStatus::kSwapped);
  EXPECT_EQ(manager.num_free_gpu_blocks(), 4);
  EXPECT_EQ(manager.num_free_cpu_blocks(), 3);
  EXPECT_FALSE(manager.FindBlockTable(1)->on_gpu);

  EXPECT_EQ(manager.CanSwapIn(*group), AllocStatus::kOk);
  auto in = manager.SwapIn(*group);
  ASSERT_TRUE(in.ok());
  EXPECT_EQ(ToPairs(*in), Moves({{0, 0}}));
  SetStatus(*group, SequenceStatus::kSwapped, SequenceStatus::kRunning);
  EXPECT_EQ(manager.num_free_gpu_blocks(), 3);
  EXPECT_EQ(manager.num_free_cpu_blocks(), 4);
  EXPECT_TRUE(manager.FindBlockTable(1)->on_gpu);
}

TEST(BlockManagerTest, NewBlockWhenLastIsFullAndFreedBlockIsReusedFirst) {
  BlockManager manager(/*block_size=*/2, /*num_gpu_blocks=*/4, /*num_cpu_blocks=*/0, 0.0);
  auto a = MakeGroup(1, 2);
  auto b = MakeGroup(2, 2);
  AllocateRunning(manager, *a);
  AllocateRunning(manager, *b);
  EXPECT_EQ(manager.GetBlockTable(2), std::vector<int>({1}));
  Sequence& seq_a = *a->seqs()[0];
  seq_a.AppendToken({5, 0.0f, {}});
  auto copy = manager.AppendSlots(seq_a);
  ASSERT_TRUE(copy.ok());
  EXPECT_FALSE(copy->has_value());
  EXPECT_EQ(manager.GetBlockTable(1), std::vector<int>({0, 2}));
  manager.Free(2);  // Block 1 goes to the front of the free list.
  auto c = MakeGroup(3, 1);
  AllocateRunning(manager, *c);
  EXPECT_EQ(manager.GetBlockTable(3), std::vector<int>({1}));
}

TEST(BlockManagerTest, CanAppendSlotsCountsOnlySequencesThatNeedABlock) {
  BlockManager manager(/*block_size=*/4, /*num_gpu_blocks=*/2, /*num_cpu_blocks=*/0, 0.0);
  auto group = MakeGroup(1, 2);
  AllocateRunning(manager, *group);
  auto other = MakeGroup(2, 4);
  AllocateRunning(manager, *other);
  EXPECT_EQ(manager.num_free_gpu_blocks(), 0);
  Sequence& seq = *group->seqs()[0];
  seq.AppendToken({1, 0.0f, {}});  // Third slot of its own block: no block needed.
  EXPECT_TRUE(manager.CanAppendSlots(*group));
  Sequence* child = group->AddForkedSequence(seq, 3);
  manager.Fork(seq, *child);
  seq.AppendToken({1, 0.0f, {}});
  child->AppendToken({2, 0.0f, {}});
  EXPECT_FALSE(manager.CanAppendSlots(*group));  // The shared block must be copied.
  other->seqs()[0]->AppendToken({1, 0.0f, {}});
  EXPECT_FALSE(manager.CanAppendSlots(*other));  // Its block is full.
  manager.Free(1);
  manager.Free(3);
  EXPECT_TRUE(manager.CanAppendSlots(*other));
}

TEST(BlockManagerTest, AllocateFailsCleanlyWhenBlocksRunOut) {
  BlockManager manager(/*block_size=*/4, /*num_gpu_blocks=*/2, /*num_cpu_blocks=*/0, 0.0);
  auto big = MakeGroup(1, 9);
  EXPECT_EQ(manager.CanAllocate(*big), AllocStatus::kNever);
  EXPECT_FALSE(manager.Allocate(*big).ok());
  EXPECT_EQ(manager.num_free_gpu_blocks(), 2);
  EXPECT_EQ(manager.FindBlockTable(1), nullptr);
}

TEST(BlockManagerTest, SwapKeepsSharingBetweenForkedSequences) {
  BlockManager manager(/*block_size=*/4, /*num_gpu_blocks=*/8, /*num_cpu_blocks=*/8, 0.0);
  auto group = MakeGroup(1, 6);
  AllocateRunning(manager, *group);
  Sequence& parent = *group->seqs()[0];
  Sequence* child = group->AddForkedSequence(parent, 2);
  manager.Fork(parent, *child);
  child->AppendToken({9, 0.0f, {}});
  auto copy = manager.AppendSlots(*child);
  ASSERT_TRUE(copy.ok() && copy->has_value());
  EXPECT_EQ(manager.GetBlockTable(1), std::vector<int>({0, 1}));
  EXPECT_EQ(manager.GetBlockTable(2), std::vector<int>({0, 2}));

  auto out = manager.SwapOut(*group);
  ASSERT_TRUE(out.ok());
  SetStatus(*group, SequenceStatus::kRunning, SequenceStatus::kSwapped);
  // Three distinct blocks, so three copies, not four.
  EXPECT_EQ(ToPairs(*out), Moves({{0, 0}, {1, 1}, {2, 2}}));
  EXPECT_EQ(manager.num_free_cpu_blocks(), 5);
  EXPECT_EQ(manager.num_free_gpu_blocks(), 8);
  EXPECT_EQ(manager.cpu_pool().ref_count(0), 2);
  EXPECT_EQ(manager.cpu_pool().ref_count(1), 1);
  EXPECT_EQ(manager.GetBlockTable(1), std::vector<int>({0, 1}));
  EXPECT_EQ(manager.GetBlockTable(2), std::vector<int>({0, 2}));

  // Swap out released GPU blocks 1, 0, 2 in that order; the free list is
  // LIFO, so the copies of CPU blocks 0, 1, 2 land in GPU blocks 2, 0, 1.
  auto in = manager.SwapIn(*group);
  ASSERT_TRUE(in.ok());
  SetStatus(*group, SequenceStatus::kSwapped, SequenceStatus::kRunning);
  EXPECT_EQ(ToPairs(*in), Moves({{0, 2}, {1, 0}, {2, 1}}));
  EXPECT_EQ(manager.GetBlockTable(1), std::vector<int>({2, 0}));
  EXPECT_EQ(manager.GetBlockTable(2), std::vector<int>({2, 1}));
  EXPECT_EQ(manager.gpu_pool().ref_count(2), 2);
  EXPECT_EQ(manager.num_free_gpu_blocks(), 5);
  EXPECT_EQ(manager.num_free_cpu_blocks(), 8);

  manager.Free(1);
  manager.Free(2);
  EXPECT_EQ(manager.num_free_gpu_blocks(), 8);
  EXPECT_EQ(manager.num_free_cpu_blocks(), 8);
  EXPECT_TRUE(manager.block_tables().empty());
}

TEST(BlockManagerTest, SwapOutNeedsRoomForDistinctBlocksOnly) {
  BlockManager manager(/*block_size=*/4, /*num_gpu_blocks=*/8, /*num_cpu_blocks=*/2, 0.0);
  auto group = MakeGroup(1, 8);
  AllocateRunning(manager, *group);
  Sequence* child = group->AddForkedSequence(*group->seqs()[0], 2);
  manager.Fork(*group->seqs()[0], *child);
  EXPECT_TRUE(manager.CanSwapOut(*group));  // 2 shared blocks, 2 CPU blocks.
  child->AppendToken({3, 0.0f, {}});
  ASSERT_TRUE(manager.AppendSlots(*child).ok());
  EXPECT_FALSE(manager.CanSwapOut(*group));  // Now 3 distinct blocks.
  EXPECT_FALSE(manager.SwapOut(*group).ok());
  EXPECT_TRUE(manager.FindBlockTable(1)->on_gpu);
}

TEST(BlockManagerTest, SwapInReservesOneBlockPerSequence) {
  BlockManager manager(/*block_size=*/4, /*num_gpu_blocks=*/4, /*num_cpu_blocks=*/8, 0.0);
  auto group = MakeGroup(1, 12);  // 3 blocks.
  AllocateRunning(manager, *group);
  ASSERT_TRUE(manager.SwapOut(*group).ok());
  SetStatus(*group, SequenceStatus::kRunning, SequenceStatus::kSwapped);
  EXPECT_EQ(manager.CanSwapIn(*group), AllocStatus::kOk);  // 3 + 1 <= 4.
  auto other = MakeGroup(2, 1);
  AllocateRunning(manager, *other);
  EXPECT_EQ(manager.CanSwapIn(*group), AllocStatus::kLater);  // 3 + 1 > 3 free.
  manager.Free(2);
  EXPECT_EQ(manager.CanSwapIn(*group), AllocStatus::kOk);

  auto full = MakeGroup(3, 16);  // 4 blocks: with its next token it can never fit.
  AllocateRunning(manager, *full);
  ASSERT_TRUE(manager.SwapOut(*full).ok());
  SetStatus(*full, SequenceStatus::kRunning, SequenceStatus::kSwapped);
  EXPECT_EQ(manager.CanSwapIn(*full), AllocStatus::kNever);
}

// ---------------------------------------------------------------------------
// Prefix caching and the evictor.

std::unique_ptr<SequenceGroup> GroupWithPrompt(int64_t seq_id, std::vector<int32_t> prompt) {
  return std::make_unique<SequenceGroup>("req" + std::to_string(seq_id), std::move(prompt), seq_id,
                                         SamplingOptions{}, StoppingOptions{}, absl::Now());
}

// Allocates the group, marks it running and its whole length computed, as
// a finished prefill step would.
void PrefillAndCommit(BlockManager& manager, SequenceGroup& group) {
  AllocateRunning(manager, group);
  for (Sequence* seq : group.SeqsWithStatus(SequenceStatus::kRunning)) {
    seq->set_num_computed_tokens(seq->length());
    manager.CommitComputedBlocks(*seq);
  }
}

TEST(PrefixCacheTest, HitReusesComputedFullBlocksAndCountsTokens) {
  BlockManager manager(/*block_size=*/4, /*num_gpu_blocks=*/10, 0, 0.0, /*prefix_caching=*/true);
  auto first = GroupWithPrompt(1, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  PrefillAndCommit(manager, *first);
  EXPECT_EQ(manager.GetBlockTable(1), std::vector<int>({0, 1, 2}));
  EXPECT_EQ(manager.gpu_pool().num_cached(), 2);  // Two full blocks; the third is partial.

  auto second = GroupWithPrompt(2, {1, 2, 3, 4, 5, 6, 7, 8, 50, 51, 52});
  AllocateRunning(manager, *second);
  EXPECT_EQ(manager.GetBlockTable(2), std::vector<int>({0, 1, 3}));
  EXPECT_EQ(manager.FindBlockTable(2)->num_cached_tokens, 8);
  EXPECT_EQ(manager.gpu_pool().ref_count(0), 2);
  EXPECT_EQ(manager.prefix_cache_queries(), 10 + 11);
  EXPECT_EQ(manager.prefix_cache_hits(), 8);
}

// A sequence of a LoRA adapter (KvSequence::lora_id), as the engine's
// sequences will report it, in a one-sequence group.
class AdapterSequence final : public KvSequence, public KvSequenceGroup {
 public:
  AdapterSequence(int64_t id, std::vector<int32_t> tokens, int lora_id)
      : id_(id), tokens_(std::move(tokens)), lora_id_(lora_id) {}
  int64_t seq_id() const override { return id_; }
  int length() const override { return static_cast<int>(tokens_.size()); }
  int32_t token_at(int i) const override { return tokens_[i]; }
  int num_computed_tokens() const override { return computed_; }
  int lora_id() const override { return lora_id_; }
  absl::InlinedVector<const KvSequence*, 1> SequencesIn(KvPhase phase) const override {
    if (phase != (computed_ == 0 ? KvPhase::kWaiting : KvPhase::kRunning)) return {};
    return {this};
  }
  // Allocates it and computes the whole prompt, as a prefill step would.
  void Prefill(BlockManager& manager) {
    ASSERT_TRUE(manager.Allocate(*this).ok());
    computed_ = length();
    manager.CommitComputedBlocks(*this);
  }

 private:
  int64_t id_;
  std::vector<int32_t> tokens_;
  int lora_id_;
  int computed_ = 0;
};

// The same prompt under the base model and two adapters: each finds only
// its own cached prefix (the K/V differ), and its events name its adapter.
TEST(PrefixCacheTest, AdaptersAndTheBaseModelNeverShareCachedBlocks) {
  BlockManager manager(4, 20, 0, 0.0, true);
  manager.EnableKvEvents();
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  AdapterSequence base(1, prompt, 0), sql(2, prompt, 7);
  base.Prefill(manager);
  sql.Prefill(manager);
  EXPECT_EQ(manager.FindBlockTable(2)->num_cached_tokens, 0);  // Not the base's blocks.
  const std::vector<KvCacheEvent> events = TakeKvEvents(manager);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].lora_id, std::nullopt);
  EXPECT_EQ(events[1].lora_id, 7);
  EXPECT_EQ(events[1].parent_hash, std::nullopt);  // A first block, as the base's.

  AdapterSequence sql_again(3, prompt, 7), chat(4, prompt, 9), base_again(5, prompt, 0);
  ASSERT_TRUE(manager.Allocate(sql_again).ok());
  EXPECT_EQ(manager.FindBlockTable(3)->num_cached_tokens, 8);
  ASSERT_TRUE(manager.Allocate(chat).ok());
  EXPECT_EQ(manager.FindBlockTable(4)->num_cached_tokens, 0);
  ASSERT_TRUE(manager.Allocate(base_again).ok());
  EXPECT_EQ(manager.FindBlockTable(5)->num_cached_tokens, 8);
  EXPECT_NE(manager.GetBlockTable(3)[0], manager.GetBlockTable(5)[0]);
  // A full resync names each block's adapter too.
  int adapter_blocks = 0;
  for (const KvCacheEvent& event : ToEvents(manager.CachedBlocksAsEvents())) {
    if (event.lora_id == 7) adapter_blocks += static_cast<int>(event.block_hashes.size());
  }
  EXPECT_EQ(adapter_blocks, 2);
}

TEST(PrefixCacheTest, FullyCachedPromptStillComputesItsLastToken) {
  BlockManager manager(4, 10, 0, 0.0, true);
  auto first = GroupWithPrompt(1, {1, 2, 3, 4, 5, 6, 7, 8});
  PrefillAndCommit(manager, *first);
  auto twin = GroupWithPrompt(2, {1, 2, 3, 4, 5, 6, 7, 8});
  AllocateRunning(manager, *twin);
  // Block 1 holds the last token, which must produce logits: a fresh block.
  EXPECT_EQ(manager.GetBlockTable(2), std::vector<int>({0, 2}));
  EXPECT_EQ(manager.FindBlockTable(2)->num_cached_tokens, 4);
}

// EAGLE: the last matched block is computed again, in a block of the
// sequence's own, and the cached one stays cached for others.
TEST(PrefixCacheTest, EagleRecomputesTheLastMatchedBlock) {
  BlockManager manager(4, 10, 0, 0.0, true);
  manager.set_recompute_last_cached_block(true);
  auto first = GroupWithPrompt(1, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13});
  PrefillAndCommit(manager, *first);
  const int free_before = manager.gpu_pool().num_free();
  auto second = GroupWithPrompt(2, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 20});
  AllocateRunning(manager, *second);
  const std::vector<int>& cached = manager.GetBlockTable(1);
  const std::vector<int>& table = manager.GetBlockTable(2);
  ASSERT_EQ(table.size(), 4u);
  EXPECT_EQ(table[0], cached[0]);
  EXPECT_EQ(table[1], cached[1]);
  EXPECT_NE(table[2], cached[2]);
  EXPECT_EQ(manager.FindBlockTable(2)->num_cached_tokens, 8);
  EXPECT_EQ(manager.gpu_pool().num_free(), free_before - 2);  // Blocks 2 and 3 are new.
  // A prompt that matches one block only recomputes it.
  auto third = GroupWithPrompt(3, {1, 2, 3, 4, 30});
  AllocateRunning(manager, *third);
  EXPECT_EQ(manager.FindBlockTable(3)->num_cached_tokens, 0);
  EXPECT_NE(manager.GetBlockTable(3)[0], manager.GetBlockTable(1)[0]);
}

TEST(PrefixCacheTest, BlocksAreCachedOnlyOnceComputed) {
  BlockManager manager(4, 10, 0, 0.0, true);
  auto first = GroupWithPrompt(1, {1, 2, 3, 4, 5, 6});
  AllocateRunning(manager, *first);  // Scheduled, not yet computed.
  auto second = GroupWithPrompt(2, {1, 2, 3, 4, 5, 6});
  AllocateRunning(manager, *second);
  EXPECT_EQ(manager.FindBlockTable(2)->num_cached_tokens, 0);
  EXPECT_EQ(manager.gpu_pool().num_cached(), 0);
}

std::unique_ptr<SequenceGroup> GroupSkippingCache(int64_t seq_id, std::vector<int32_t> prompt) {
  SamplingOptions scored;
  scored.num_prompt_logprobs = 0;  // Prompt logprobs: every row computed.
  return std::make_unique<SequenceGroup>("req" + std::to_string(seq_id), std::move(prompt), seq_id,
                                         scored, StoppingOptions{}, absl::Now());
}

TEST(PrefixCacheTest, GroupThatSkipsTheCacheGetsFreshBlocksAndStillPublishesThem) {
  BlockManager manager(4, 16, 0, 0.0, true);
  auto first = GroupWithPrompt(1, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  PrefillAndCommit(manager, *first);
  auto skipper = GroupSkippingCache(2, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  ASSERT_TRUE(skipper->SkipsPrefixCache());
  const int64_t queries = manager.prefix_cache_queries();
  PrefillAndCommit(manager, *skipper);
  EXPECT_EQ(manager.FindBlockTable(2)->num_cached_tokens, 0);
  EXPECT_EQ(manager.GetBlockTable(2), std::vector<int>({3, 4, 5}));
  EXPECT_EQ(manager.prefix_cache_queries(), queries);  // Nothing looked up.

  auto new_prompt = GroupSkippingCache(3, {20, 21, 22, 23, 24, 25, 26, 27, 28});
  PrefillAndCommit(manager, *new_prompt);
  auto reader = GroupWithPrompt(4, {20, 21, 22, 23, 24, 25, 26, 27, 28});
  AllocateRunning(manager, *reader);
  EXPECT_EQ(manager.FindBlockTable(4)->num_cached_tokens, 8);
  EXPECT_EQ(manager.GetBlockTable(4), std::vector<int>({6, 7, 9}));
}

uint64_t CollidingHash(uint64_t, absl::Span<const int32_t>) { return 42; }

TEST(PrefixCacheTest, HashCollisionIsAMissAfterTokenComparison) {
  BlockManager manager(4, 10, 0, 0.0, true, &CollidingHash);
  auto first = GroupWithPrompt(1, {1, 2, 3, 4, 5});
  PrefillAndCommit(manager, *first);
  auto other = GroupWithPrompt(2, {9, 9, 9, 9, 5});  // Same hash, other tokens.
  AllocateRunning(manager, *other);
  EXPECT_EQ(manager.FindBlockTable(2)->num_cached_tokens, 0);
  EXPECT_EQ(manager.GetBlockTable(2), std::vector<int>({2, 3}));
}

TEST(PrefixCacheTest, DisabledCachesNothing) {
  BlockManager manager(4, 10, 0, 0.0, /*prefix_caching=*/false);
  auto first = GroupWithPrompt(1, {1, 2, 3, 4, 5});
  PrefillAndCommit(manager, *first);
  auto second = GroupWithPrompt(2, {1, 2, 3, 4, 5});
  AllocateRunning(manager, *second);
  EXPECT_EQ(manager.FindBlockTable(2)->num_cached_tokens, 0);
  EXPECT_EQ(manager.prefix_cache_queries(), 0);
}

TEST(EvictorTest, FreedCachedBlocksCountAsFreeAndServeLaterHits) {
  BlockManager manager(4, 4, 0, 0.0, true);
  auto first = GroupWithPrompt(1, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  PrefillAndCommit(manager, *first);
  manager.Free(1);
  // Blocks 0 and 1 stay cached (evictable); block 2 was partial: free list.
  EXPECT_EQ(manager.num_free_gpu_blocks(), 4);
  EXPECT_EQ(manager.gpu_pool().num_evictable(), 2);
  EXPECT_EQ(manager.gpu_pool().free_list(), std::deque<int>({2, 3}));

  auto again = GroupWithPrompt(2, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  AllocateRunning(manager, *again);
  EXPECT_EQ(manager.GetBlockTable(2), std::vector<int>({0, 1, 2}));
  EXPECT_EQ(manager.gpu_pool().num_evictable(), 0);  // Hits leave the evictor.
  EXPECT_EQ(manager.num_free_gpu_blocks(), 1);
}

TEST(EvictorTest, EvictsLeastRecentlyUsedAndTailBeforeHead) {
  BlockManager manager(4, 5, 0, 0.0, true);
  auto old_chain = GroupWithPrompt(1, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  PrefillAndCommit(manager, *old_chain);  // Blocks 0, 1 cached; 2 partial.
  auto new_chain = GroupWithPrompt(2, {20, 21, 22, 23, 24});
  PrefillAndCommit(manager, *new_chain);  // Block 3 cached; 4 partial.
  manager.Free(1);
  manager.Free(2);  // Freed later: more recently used than blocks 0 and 1.
  EXPECT_EQ(manager.num_free_gpu_blocks(), 5);

  // 3 fresh blocks: the two uncached ones first, then the LRU cached block,
  // which is the tail (1) of the older chain, not its head (0).
  auto fresh = GroupWithPrompt(3, {30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40});
  AllocateRunning(manager, *fresh);
  EXPECT_EQ(manager.GetBlockTable(3), std::vector<int>({4, 2, 1}));
  EXPECT_FALSE(manager.gpu_pool().hash(1).has_value());
  EXPECT_TRUE(manager.gpu_pool().hash(0).has_value());
  EXPECT_TRUE(manager.gpu_pool().hash(3).has_value());
  auto head_hit = GroupWithPrompt(4, {1, 2, 3, 4, 99});
  AllocateRunning(manager, *head_hit);
  EXPECT_EQ(manager.FindBlockTable(4)->num_cached_tokens, 4);
}

TEST(EvictorTest, ResetPrefixCacheForgetsEveryCachedBlock) {
  BlockManager manager(4, 6, 0, 0.0, true);
  auto gone = GroupWithPrompt(1, {1, 2, 3, 4, 5});
  PrefillAndCommit(manager, *gone);
  manager.Free(1);  // Block 0 evictable.
  auto held = GroupWithPrompt(2, {7, 8, 9, 10, 11});
  PrefillAndCommit(manager, *held);  // Its block 0 cached and used.
  ASSERT_EQ(manager.gpu_pool().num_cached(), 2);
  manager.ResetPrefixCache();
  EXPECT_EQ(manager.gpu_pool().num_cached(), 0);
  EXPECT_EQ(manager.gpu_pool().num_evictable(), 0);
  EXPECT_EQ(manager.num_free_gpu_blocks(), 4);
  EXPECT_TRUE(manager.FindBlockTable(2)->hashes.empty());
  auto again = GroupWithPrompt(3, {1, 2, 3, 4, 5});
  AllocateRunning(manager, *again);
  EXPECT_EQ(manager.FindBlockTable(3)->num_cached_tokens, 0);
  // The held sequence's blocks are hashed again by the next commit.
  manager.CommitComputedBlocks(*held->seqs()[0]);
  EXPECT_EQ(manager.gpu_pool().num_cached(), 1);
}

TEST(EvictorTest, SwapOutKeepsGpuCopyCachedAndSwapInRegistersAgain) {
  BlockManager manager(4, 6, 6, 0.0, true);
  auto group = GroupWithPrompt(1, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  PrefillAndCommit(manager, *group);
  ASSERT_TRUE(manager.SwapOut(*group).ok());
  SetStatus(*group, SequenceStatus::kRunning, SequenceStatus::kSwapped);
  EXPECT_EQ(manager.gpu_pool().num_evictable(), 2);
  EXPECT_EQ(manager.num_free_gpu_blocks(), 6);
  ASSERT_TRUE(manager.SwapIn(*group).ok());
  SetStatus(*group, SequenceStatus::kSwapped, SequenceStatus::kRunning);
  // The old GPU copies still hold the hashes; the new ones are plain blocks.
  EXPECT_EQ(manager.gpu_pool().num_cached(), 2);
  EXPECT_EQ(manager.num_free_gpu_blocks(), 3);
}

// ---------------------------------------------------------------------------
// Randomized operations checked against the invariants after every step.

class RandomizedBlockManagerTest : public ::testing::TestWithParam<int> {};

// A block pool's "KV bytes": the token id written in each slot.
using Memory = std::vector<std::vector<int32_t>>;

struct World {
  std::vector<std::unique_ptr<SequenceGroup>> groups;
  int64_t next_seq_id = 1;
  Memory gpu;
  Memory cpu;
};

// Writes seq's tokens [from, length) into the slots its table maps them to.
void WriteTokens(const BlockManager& manager, const Sequence& seq, int from, Memory& memory) {
  const std::vector<int>& table = manager.GetBlockTable(seq.seq_id());
  const int block_size = manager.block_size();
  for (int p = from; p < seq.length(); ++p)
    memory[table[p / block_size]][p % block_size] = seq.token_at(p);
}

void ApplyMoves(const std::vector<BlockMove>& moves, const Memory& from, Memory& to) {
  for (const BlockMove& move : moves) to[move.dst] = from[move.src];
}

std::vector<int32_t> TokensOfBlock(const Sequence& seq, int index, int block_size) {
  std::vector<int32_t> tokens;
  for (int p = index * block_size; p < std::min(seq.length(), (index + 1) * block_size); ++p) {
    tokens.push_back(seq.token_at(p));
  }
  return tokens;
}

void CheckInvariants(const BlockManager& manager, const World& world) {
  const int block_size = manager.block_size();
  for (bool gpu : {true, false}) {
    const BlockPool& pool = gpu ? manager.gpu_pool() : manager.cpu_pool();
    const Memory& memory = gpu ? world.gpu : world.cpu;
    std::vector<int> expected(pool.num_total(), 0);
    for (const auto& [seq_id, table] : manager.block_tables()) {
      if (table.on_gpu != gpu) continue;
      absl::flat_hash_set<int> in_table;
      for (int block : table.blocks) {
        ASSERT_GE(block, 0);
        ASSERT_LT(block, pool.num_total());
        ASSERT_TRUE(in_table.insert(block).second) << "block listed twice in one table";
        ++expected[block];
      }
    }
    absl::flat_hash_set<int> free_blocks;
    for (int block : pool.free_list()) {
      ASSERT_TRUE(free_blocks.insert(block).second) << "block free twice: " << block;
    }
    int used = 0;
    int evictable = 0;
    for (int block = 0; block < pool.num_total(); ++block) {
      ASSERT_EQ(pool.ref_count(block), expected[block]) << (gpu ? "GPU" : "CPU") << " " << block;
      // Exactly one place: used, free list or evictor.
      const bool in_evictor = pool.is_evictable(block);
      ASSERT_EQ(free_blocks.contains(block), expected[block] == 0 && !in_evictor) << block;
      if (free_blocks.contains(block)) {
        ASSERT_FALSE(pool.hash(block).has_value());
      }
      if (expected[block] > 0) ++used;
      if (in_evictor) ++evictable;
      // A cached block (used or evictable) still holds the tokens it is cached for.
      if (pool.hash(block).has_value()) {
        ASSERT_TRUE(gpu) << "CPU blocks are never cached";
        ASSERT_EQ(pool.tokens(block), memory[block])
            << "cached block " << block << " was overwritten";
      }
    }
    ASSERT_EQ(pool.num_evictable(), evictable);
    ASSERT_EQ(pool.num_free() + used, pool.num_total());
  }
  int live = 0;
  for (const auto& group : world.groups) {
    for (const auto& seq : group->seqs()) {
      const BlockTable* table = manager.FindBlockTable(seq->seq_id());
      if (IsFinished(seq->status())) {
        ASSERT_EQ(table, nullptr);
        continue;
      }
      ++live;
      ASSERT_NE(table, nullptr);
      ASSERT_EQ(static_cast<int>(table->blocks.size()), manager.BlocksForTokens(seq->length()));
      ASSERT_EQ(table->on_gpu, seq->status() == SequenceStatus::kRunning);
      // The tokens the table maps to are the sequence's, wherever it lives.
      const Memory& memory = table->on_gpu ? world.gpu : world.cpu;
      for (int p = 0; p < seq->length(); ++p) {
        ASSERT_EQ(memory[table->blocks[p / block_size]][p % block_size], seq->token_at(p))
            << "seq " << seq->seq_id() << " position " << p;
      }
      // Chained hashes cover computed full blocks and match the tokens.
      uint64_t parent = 0;
      for (size_t b = 0; b < table->hashes.size(); ++b) {
        const std::vector<int32_t> tokens = TokensOfBlock(*seq, b, block_size);
        ASSERT_EQ(static_cast<int>(tokens.size()), block_size);
        ASSERT_EQ(table->hashes[b], manager.hasher()(parent, tokens));
        parent = table->hashes[b];
        if (table->on_gpu && manager.gpu_pool().hash(table->blocks[b]).has_value()) {
          ASSERT_EQ(*manager.gpu_pool().hash(table->blocks[b]), table->hashes[b]);
        }
      }
    }
  }
  ASSERT_EQ(static_cast<int>(manager.block_tables().size()), live);
}

// Collides often, so that the token comparison is exercised.
uint64_t WeakHash(uint64_t parent, absl::Span<const int32_t> tokens) {
  uint64_t sum = parent * 7;
  for (int32_t token : tokens) sum += token;
  return sum % 13;
}

TEST_P(RandomizedBlockManagerTest, InvariantsHoldAfterEveryOperation) {
  std::mt19937 rng(GetParam());
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  constexpr int kGpuBlocks = 40;
  constexpr int kCpuBlocks = 24;
  BlockManager manager(/*block_size=*/4, kGpuBlocks, kCpuBlocks, GetParam() % 2 == 0 ? 0.0 : 0.05,
                       /*enable_prefix_caching=*/true,
                       GetParam() % 3 == 0 ? &WeakHash : &DefaultBlockHash);
  World world;
  world.gpu.assign(kGpuBlocks, std::vector<int32_t>(4, -1));
  world.cpu.assign(kCpuBlocks, std::vector<int32_t>(4, -1));
  // Prompts start with a prefix of one of three bases, so the cache hits.
  std::vector<std::vector<int32_t>> bases(3, std::vector<int32_t>(18));
  for (auto& base : bases) {
    for (auto& token : base) token = uniform(0, 9);
  }
  auto groups_with = [&](SequenceStatus status) {
    std::vector<SequenceGroup*> result;
    for (auto& group : world.groups) {
      if (!group->SeqsWithStatus(status).empty()) result.push_back(group.get());
    }
    return result;
  };
  // Marks seq computed (as a finished step would) and commits its blocks.
  auto compute = [&](Sequence& seq) {
    seq.set_num_computed_tokens(seq.length());
    manager.CommitComputedBlocks(seq);
  };
  int counts[6] = {};
  int evictions = 0;
  for (int step = 0; step < 4000; ++step) {
    const int op = uniform(0, 5);
    std::vector<SequenceGroup*> running = groups_with(SequenceStatus::kRunning);
    std::vector<SequenceGroup*> swapped = groups_with(SequenceStatus::kSwapped);
    const int cached_before = manager.gpu_pool().num_cached();
    const int evictable_before = manager.gpu_pool().num_evictable();
    if (op == 0) {  // New prompt.
      const std::vector<int32_t>& base = bases[uniform(0, 2)];
      std::vector<int32_t> prompt(base.begin(), base.begin() + uniform(1, 18));
      for (int extra = uniform(0, 3); extra > 0; --extra) prompt.push_back(uniform(0, 9));
      auto group =
          std::make_unique<SequenceGroup>("r", std::move(prompt), world.next_seq_id++,
                                          SamplingOptions{}, StoppingOptions{}, absl::Now());
      if (manager.CanAllocate(*group) == AllocStatus::kOk) {
        ASSERT_TRUE(manager.Allocate(*group).ok());
        SetStatus(*group, SequenceStatus::kWaiting, SequenceStatus::kRunning);
        Sequence& seq = *group->seqs()[0];
        const int cached = manager.FindBlockTable(seq.seq_id())->num_cached_tokens;
        ASSERT_LT(cached, seq.length());
        WriteTokens(manager, seq, cached, world.gpu);  // The prefill.
        compute(seq);
        world.groups.push_back(std::move(group));
        ++counts[op];
      }
    } else if (op == 1 && !running.empty()) {  // Decode one token per running sequence.
      SequenceGroup* group = running[uniform(0, running.size() - 1)];
      for (Sequence* seq : group->SeqsWithStatus(SequenceStatus::kRunning)) {
        seq->AppendToken({uniform(0, 9), 0.0f, {}});
      }
      if (!manager.CanAppendSlots(*group)) {
        // No room to grow: drop the group's running sequences, as a
        // recompute preemption would.
        for (Sequence* seq : group->SeqsWithStatus(SequenceStatus::kRunning)) {
          manager.Free(seq->seq_id());
          seq->set_status(SequenceStatus::kFinishedAborted);
        }
      } else {
        std::vector<BlockMove> copies;
        for (Sequence* seq : group->SeqsWithStatus(SequenceStatus::kRunning)) {
          auto copy = manager.AppendSlots(*seq);
          ASSERT_TRUE(copy.ok()) << copy.status();
          if (copy->has_value()) {
            ASSERT_EQ(manager.gpu_pool().ref_count((*copy)->dst), 1);
            ASSERT_GE(manager.gpu_pool().ref_count((*copy)->src), 1);
            copies.push_back(**copy);
          }
        }
        // The workers copy first, then every sequence writes its token.
        ApplyMoves(copies, world.gpu, world.gpu);
        for (Sequence* seq : group->SeqsWithStatus(SequenceStatus::kRunning)) {
          WriteTokens(manager, *seq, seq->length() - 1, world.gpu);
          compute(*seq);
        }
        ++counts[op];
      }
    } else if (op == 2 && !running.empty()) {  // Fork.
      SequenceGroup* group = running[uniform(0, running.size() - 1)];
      if (group->NumUnfinished() < 4) {
        auto parents = group->SeqsWithStatus(SequenceStatus::kRunning);
        Sequence* parent = parents[uniform(0, parents.size() - 1)];
        Sequence* child = group->AddForkedSequence(*parent, world.next_seq_id++);
        manager.Fork(*parent, *child);
        ++counts[op];
      }
    } else if (op == 3 && !world.groups.empty()) {  // Finish one sequence.
      SequenceGroup* group = world.groups[uniform(0, world.groups.size() - 1)].get();
      Sequence* seq = group->seqs()[uniform(0, group->seqs().size() - 1)].get();
      if (!IsFinished(seq->status())) {
        manager.Free(seq->seq_id());
        seq->set_status(SequenceStatus::kFinishedStopped);
        ++counts[op];
      }
    } else if (op == 4 && !running.empty()) {  // Swap out.
      SequenceGroup* group = running[uniform(0, running.size() - 1)];
      if (manager.CanSwapOut(*group)) {
        auto moves = manager.SwapOut(*group);
        ASSERT_TRUE(moves.ok()) << moves.status();
        ApplyMoves(*moves, world.gpu, world.cpu);
        SetStatus(*group, SequenceStatus::kRunning, SequenceStatus::kSwapped);
        ++counts[op];
      } else {
        ASSERT_FALSE(manager.SwapOut(*group).ok());
      }
    } else if (op == 5 && !swapped.empty()) {  // Swap in.
      SequenceGroup* group = swapped[uniform(0, swapped.size() - 1)];
      if (manager.CanSwapIn(*group) == AllocStatus::kOk) {
        auto moves = manager.SwapIn(*group);
        ASSERT_TRUE(moves.ok()) << moves.status();
        ApplyMoves(*moves, world.cpu, world.gpu);
        SetStatus(*group, SequenceStatus::kSwapped, SequenceStatus::kRunning);
        ++counts[op];
      }
    }
    if (uniform(0, 400) == 0) manager.ResetPrefixCache();  // A worker restarted.
    // An eviction: a cached block lost its hash to make room.
    if (manager.gpu_pool().num_cached() < cached_before &&
        manager.gpu_pool().num_evictable() < evictable_before) {
      ++evictions;
    }
    ASSERT_NO_FATAL_FAILURE(CheckInvariants(manager, world)) << "after step " << step;
  }
  for (int op = 0; op < 6; ++op) EXPECT_GE(counts[op], 10) << "operation " << op << " too rare";
  EXPECT_GT(manager.prefix_cache_hits(), 100);
  EXPECT_GE(evictions, 10);
  // Freeing everything restores every count.
  for (auto& group : world.groups) {
    for (auto& seq : group->seqs()) manager.Free(seq->seq_id());
  }
  EXPECT_EQ(manager.num_free_gpu_blocks(), kGpuBlocks);
  EXPECT_EQ(manager.num_free_cpu_blocks(), kCpuBlocks);
  EXPECT_TRUE(manager.block_tables().empty());
}

INSTANTIATE_TEST_SUITE_P(Seeds, RandomizedBlockManagerTest, ::testing::Values(1, 2, 3, 4, 5, 6));

}  // namespace
}  // namespace pagoda::scheduler
