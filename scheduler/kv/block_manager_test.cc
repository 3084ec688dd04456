#include "scheduler/kv/block_manager.h"

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"

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

TEST(BlockManagerTest, Scenario2ForkThenCopyOnWriteOfSharedLastBlock) {
  BlockManager manager(/*block_size=*/4, /*num_gpu_blocks=*/4, /*num_cpu_blocks=*/0, 0.0);
  auto group = MakeGroup(1, 3);
  AllocateRunning(manager, *group);
  Sequence& parent = *group->seqs()[0];
  EXPECT_EQ(manager.GetBlockTable(1), std::vector<int>({0}));
  EXPECT_EQ(manager.num_free_gpu_blocks(), 3);

  Sequence* child = group->AddForkedSequence(parent, 2);
  ASSERT_TRUE(manager.Fork(parent, *child).ok());
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
  ASSERT_TRUE(manager.Fork(seq, *child).ok());
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
  ASSERT_TRUE(manager.Fork(parent, *child).ok());
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
  ASSERT_TRUE(manager.Fork(*group->seqs()[0], *child).ok());
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
// Randomized operations checked against the invariants after every step.

class RandomizedBlockManagerTest : public ::testing::TestWithParam<int> {};

struct World {
  std::vector<std::unique_ptr<SequenceGroup>> groups;
  int64_t next_seq_id = 1;
};

void CheckInvariants(const BlockManager& manager, const World& world) {
  for (bool gpu : {true, false}) {
    const BlockPool& pool = gpu ? manager.gpu_pool() : manager.cpu_pool();
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
    int unreferenced = 0;
    for (int block = 0; block < pool.num_total(); ++block) {
      ASSERT_EQ(pool.ref_count(block), expected[block]) << (gpu ? "GPU" : "CPU") << " " << block;
      // Free and referenced blocks partition the pool.
      ASSERT_EQ(free_blocks.contains(block), expected[block] == 0) << block;
      if (expected[block] == 0) ++unreferenced;
    }
    ASSERT_EQ(pool.num_free(), unreferenced);
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
    }
  }
  ASSERT_EQ(static_cast<int>(manager.block_tables().size()), live);
}

TEST_P(RandomizedBlockManagerTest, InvariantsHoldAfterEveryOperation) {
  std::mt19937 rng(GetParam());
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  BlockManager manager(/*block_size=*/4, /*num_gpu_blocks=*/40, /*num_cpu_blocks=*/24,
                       GetParam() % 2 == 0 ? 0.0 : 0.05);
  World world;
  auto groups_with = [&](SequenceStatus status) {
    std::vector<SequenceGroup*> result;
    for (auto& group : world.groups) {
      if (!group->SeqsWithStatus(status).empty()) result.push_back(group.get());
    }
    return result;
  };
  int counts[6] = {};
  for (int step = 0; step < 4000; ++step) {
    const int op = uniform(0, 5);
    std::vector<SequenceGroup*> running = groups_with(SequenceStatus::kRunning);
    std::vector<SequenceGroup*> swapped = groups_with(SequenceStatus::kSwapped);
    if (op == 0) {  // New prompt.
      std::vector<int32_t> prompt(uniform(1, 18));
      for (auto& token : prompt) token = uniform(0, 9);
      auto group =
          std::make_unique<SequenceGroup>("r", std::move(prompt), world.next_seq_id++,
                                          SamplingOptions{}, StoppingOptions{}, absl::Now());
      if (manager.CanAllocate(*group) == AllocStatus::kOk) {
        ASSERT_TRUE(manager.Allocate(*group).ok());
        SetStatus(*group, SequenceStatus::kWaiting, SequenceStatus::kRunning);
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
        for (Sequence* seq : group->SeqsWithStatus(SequenceStatus::kRunning)) {
          auto copy = manager.AppendSlots(*seq);
          ASSERT_TRUE(copy.ok()) << copy.status();
          if (copy->has_value()) {
            ASSERT_EQ(manager.gpu_pool().ref_count((*copy)->dst), 1);
            ASSERT_GE(manager.gpu_pool().ref_count((*copy)->src), 1);
          }
        }
        ++counts[op];
      }
    } else if (op == 2 && !running.empty()) {  // Fork.
      SequenceGroup* group = running[uniform(0, running.size() - 1)];
      if (group->NumUnfinished() < 4) {
        auto parents = group->SeqsWithStatus(SequenceStatus::kRunning);
        Sequence* parent = parents[uniform(0, parents.size() - 1)];
        Sequence* child = group->AddForkedSequence(*parent, world.next_seq_id++);
        ASSERT_TRUE(manager.Fork(*parent, *child).ok());
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
        SetStatus(*group, SequenceStatus::kSwapped, SequenceStatus::kRunning);
        ++counts[op];
      }
    }
    ASSERT_NO_FATAL_FAILURE(CheckInvariants(manager, world)) << "after step " << step;
  }
  for (int op = 0; op < 6; ++op) EXPECT_GE(counts[op], 10) << "operation " << op << " too rare";
  // Freeing everything restores every count.
  for (auto& group : world.groups) {
    for (auto& seq : group->seqs()) manager.Free(seq->seq_id());
  }
  EXPECT_EQ(manager.num_free_gpu_blocks(), 40);
  EXPECT_EQ(manager.num_free_cpu_blocks(), 24);
  EXPECT_TRUE(manager.block_tables().empty());
}

INSTANTIATE_TEST_SUITE_P(Seeds, RandomizedBlockManagerTest, ::testing::Values(1, 2, 3, 4, 5, 6));

}  // namespace
}  // namespace pagoda::scheduler
