// BlockTableCache against the whole tables: randomized plans whose rows carry
// deltas by the protocol's rule (the prefix a row shares with its table of
// the step before, when that step ran here), through growth, copy-on-write,
// remapping, recompute, forks, rollback, rows that sit out, skipped step ids
// and failed steps; and each refusal the rule makes.

#include "worker/block_table_cache.h"

#include <map>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace pagoda::worker {
namespace {

using Table = std::vector<int32_t>;

v1::SequenceStep* AddRow(v1::StepPlan* plan, int64_t seq_id, int start, const Table& entries) {
  v1::SequenceStep* row = plan->add_sequences();
  row->set_seq_id(seq_id);
  row->set_block_table_start(start);
  row->mutable_block_table()->Add(entries.begin(), entries.end());
  return row;
}

Table TableOf(const v1::SequenceStep& row) {
  return {row.block_table().begin(), row.block_table().end()};
}

// A server's encoding: the common prefix with what the last sent plan had,
// when the worker ran it (`sent_step` is step - 1).
int CommonPrefix(const std::map<int64_t, Table>& sent, int64_t seq_id, const Table& table) {
  auto it = sent.find(seq_id);
  if (it == sent.end()) return 0;
  size_t n = 0;
  while (n < it->second.size() && n < table.size() && it->second[n] == table[n]) ++n;
  return static_cast<int>(n);
}

TEST(BlockTableCacheTest, RandomizedDeltasResolveToTheWholeTables) {
  std::mt19937 rng(4711);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  BlockTableCache cache;
  cache.Reset(1 << 20);
  std::map<int64_t, Table> truth, sent;
  int64_t sent_step = -10, step_id = 0, next_seq = 1;
  int32_t next_block = 0;
  int delta_rows = 0;
  for (int iteration = 0; iteration < 300; ++iteration) {
    step_id += uniform(0, 9) == 0 ? 2 : 1;
    while (truth.size() < 10) truth[next_seq++] = Table{next_block++};
    if (uniform(0, 4) == 0) truth[next_seq++] = truth.begin()->second;  // Fork.
    if (uniform(0, 4) == 0) truth.erase(truth.begin());                 // Finished.
    v1::StepPlan plan;
    plan.set_step_id(step_id);
    std::map<int64_t, Table> in_plan;
    for (auto& [seq_id, table] : truth) {
      if (uniform(0, 5) == 0) continue;  // Sits out.
      switch (uniform(0, 6)) {
        case 0:
          if (!table.empty()) table.back() = next_block++;
          break;  // Copy-on-write.
        case 1:
          for (int32_t& block : table) block = next_block++;
          break;  // Swap-in remap.
        case 2:
          table.resize(uniform(0, static_cast<int>(table.size())));
          break;  // Recompute/rollback.
        case 3:
          break;
        default:
          table.push_back(next_block++);
      }
      const int start = sent_step == step_id - 1 ? CommonPrefix(sent, seq_id, table) : 0;
      AddRow(&plan, seq_id, start, Table(table.begin() + start, table.end()));
      delta_rows += start > 0;
      in_plan[seq_id] = table;
    }
    ASSERT_TRUE(cache.Resolve(&plan).ok()) << "step " << step_id;
    for (const v1::SequenceStep& row : plan.sequences()) {
      EXPECT_EQ(row.block_table_start(), 0);
      EXPECT_EQ(TableOf(row), in_plan[row.seq_id()]) << "step " << step_id;
    }
    if (uniform(0, 14) == 0) {  // The step failed: the worker drops its tables.
      cache.Clear();
      sent_step = -10;
      continue;
    }
    cache.Commit();
    sent = std::move(in_plan);
    sent_step = step_id;
    EXPECT_EQ(cache.num_sequences(), static_cast<int>(sent.size()));  // Only the last step's.
  }
  EXPECT_GT(delta_rows, 1000);
}

TEST(BlockTableCacheTest, RefusesDeltasTheRuleDoesNotAllow) {
  BlockTableCache cache;
  cache.Reset(/*max_table_blocks=*/8);
  v1::StepPlan first;
  first.set_step_id(5);
  AddRow(&first, 1, 0, {1, 2, 3});
  ASSERT_TRUE(cache.Resolve(&first).ok());
  cache.Commit();
  EXPECT_EQ(*cache.step_id(), 5);

  auto resolve = [&](int64_t step_id, int64_t seq_id, int start, const Table& entries) {
    v1::StepPlan plan;
    plan.set_step_id(step_id);
    AddRow(&plan, seq_id, start, entries);
    return cache.Resolve(&plan);
  };
  EXPECT_EQ(resolve(7, 1, 1, {}).code(), absl::StatusCode::kInvalidArgument);   // Not step 6.
  EXPECT_EQ(resolve(6, 2, 1, {}).code(), absl::StatusCode::kInvalidArgument);   // Not in step 5.
  EXPECT_EQ(resolve(6, 1, 4, {}).code(), absl::StatusCode::kInvalidArgument);   // Past its table.
  EXPECT_EQ(resolve(6, 1, -1, {}).code(), absl::StatusCode::kInvalidArgument);  // Negative.
  EXPECT_EQ(resolve(6, 1, 3, {4, 5, 6, 7, 8, 9}).code(),
            absl::StatusCode::kInvalidArgument);  // 9 blocks, more than the cache's 8.
  EXPECT_TRUE(resolve(6, 1, 0, {7}).ok());        // A whole table is always valid.
  v1::StepPlan shrink;
  shrink.set_step_id(6);
  AddRow(&shrink, 1, 2, {});
  ASSERT_TRUE(cache.Resolve(&shrink).ok());
  EXPECT_EQ(TableOf(shrink.sequences(0)), (Table{1, 2}));
  cache.Clear();  // A failed step.
  EXPECT_EQ(resolve(6, 1, 1, {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(cache.step_id().has_value());
}

}  // namespace
}  // namespace pagoda::worker
