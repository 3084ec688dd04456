// BlockTableCache against the whole tables: randomized plans whose rows carry
// deltas by the protocol's rule (the prefix a row shares with its table of
// the step before, when that step ran here), through growth, copy-on-write,
// remapping, recompute, forks, rollback, rows that sit out, skipped step ids
// and failed steps; rows that repeat their sampling options
// (sampling_unchanged) through options that change, penalty counts the
// worker does not keep, plans on an arena and on the heap; and each refusal
// the rule makes.

#include "worker/block_table_cache.h"

#include <map>
#include <random>
#include <vector>

#include "google/protobuf/arena.h"
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

// One row's options that change now and then, as a server's would: a new
// temperature, a ban lifted (min_tokens reached), penalty counts that grow.
void EvolveOptions(std::mt19937& rng, v1::SamplingOptions* options) {
  switch (std::uniform_int_distribution<int>(0, 9)(rng)) {
    case 0:
      options->set_temperature(options->temperature() + 0.25f);
      break;
    case 1:
      options->clear_banned_token_ids();
      break;
    case 2:
      options->add_output_token_ids(options->output_token_ids_size());
      options->add_output_token_counts(1);
      break;
    case 3:
      options->clear_output_token_ids();
      options->clear_output_token_counts();
      break;
    default:
      if (options->output_token_ids_size() > 0) {  // Counts grow every step.
        options->add_output_token_ids(options->output_token_ids_size());
        options->add_output_token_counts(1);
      }
  }
}

TEST(BlockTableCacheTest, RandomizedUnchangedSamplingResolvesToTheOptionsSent) {
  std::mt19937 rng(2719);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  BlockTableCache cache;
  cache.Reset(1 << 20);
  std::map<int64_t, v1::SamplingOptions> truth;
  std::map<int64_t, std::string> kept;  // What the worker keeps, by the rule.
  int64_t sent_step = -10, step_id = 0, next_seq = 1;
  int unchanged_rows = 0;
  for (int iteration = 0; iteration < 200; ++iteration) {
    step_id += uniform(0, 9) == 0 ? 2 : 1;
    while (truth.size() < 8) {
      v1::SamplingOptions& options = truth[next_seq++];
      options.set_seed(static_cast<uint64_t>(next_seq));
      options.add_banned_token_ids(2);
    }
    if (uniform(0, 4) == 0) truth.erase(truth.begin());  // Finished.
    google::protobuf::Arena arena;
    v1::StepPlan heap_plan;
    v1::StepPlan& plan = iteration % 2 == 0
                             ? heap_plan
                             : *google::protobuf::Arena::CreateMessage<v1::StepPlan>(&arena);
    plan.set_step_id(step_id);
    std::map<int64_t, std::string> in_plan;
    for (auto& [seq_id, options] : truth) {
      if (uniform(0, 5) == 0) continue;  // Sits out.
      EvolveOptions(rng, &options);
      const std::string bytes = options.SerializeAsString();
      v1::SequenceStep* row = AddRow(&plan, seq_id, 0, {1});
      auto it = kept.find(seq_id);
      if (sent_step == step_id - 1 && it != kept.end() && it->second == bytes) {
        row->set_sampling_unchanged(true);
        ++unchanged_rows;
      } else {
        *row->mutable_sampling() = options;
      }
      if (options.output_token_ids_size() == 0) in_plan[seq_id] = bytes;
    }
    ASSERT_TRUE(cache.Resolve(&plan).ok()) << "step " << step_id;
    for (const v1::SequenceStep& row : plan.sequences()) {
      EXPECT_FALSE(row.sampling_unchanged());
      EXPECT_EQ(row.sampling().SerializeAsString(), truth[row.seq_id()].SerializeAsString())
          << "step " << step_id << ", sequence " << row.seq_id();
    }
    if (uniform(0, 14) == 0) {  // The step failed: the worker drops every row.
      cache.Clear();
      sent_step = -10;
      continue;
    }
    cache.Commit();
    kept = std::move(in_plan);
    sent_step = step_id;
    for (const auto& [seq_id, bytes] : kept) {
      ASSERT_NE(cache.FindSampling(seq_id), nullptr);
      EXPECT_EQ(cache.FindSampling(seq_id)->SerializeAsString(), bytes);
    }
  }
  EXPECT_GT(unchanged_rows, 300);
}

TEST(BlockTableCacheTest, RefusesUnchangedSamplingTheRuleDoesNotAllow) {
  BlockTableCache cache;
  cache.Reset(/*max_table_blocks=*/8);
  v1::StepPlan first;
  first.set_step_id(5);
  AddRow(&first, 1, 0, {1})->mutable_sampling()->set_temperature(0.5f);
  AddRow(&first, 2, 0, {2})->mutable_sampling()->add_output_token_ids(9);  // Not kept.
  ASSERT_TRUE(cache.Resolve(&first).ok());
  cache.Commit();
  ASSERT_NE(cache.FindSampling(1), nullptr);
  EXPECT_EQ(cache.FindSampling(2), nullptr);

  auto resolve = [&](int64_t step_id, std::vector<int64_t> seq_ids, bool with_options) {
    v1::StepPlan plan;
    plan.set_step_id(step_id);
    for (int64_t seq_id : seq_ids) {
      v1::SequenceStep* row = AddRow(&plan, seq_id, 0, {1});
      row->set_sampling_unchanged(true);
      if (with_options) row->mutable_sampling()->set_temperature(0.5f);
    }
    return cache.Resolve(&plan);
  };
  const absl::Status not_chained = resolve(7, {1}, false);
  EXPECT_EQ(not_chained.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(not_chained.message().find("sequence 1"), std::string::npos) << not_chained;
  EXPECT_EQ(resolve(6, {3}, false).code(), absl::StatusCode::kInvalidArgument);  // Not in 5.
  EXPECT_EQ(resolve(6, {2}, false).code(), absl::StatusCode::kInvalidArgument);  // Not kept.
  EXPECT_EQ(resolve(6, {1}, true).code(), absl::StatusCode::kInvalidArgument);   // Given too.
  EXPECT_EQ(resolve(6, {1, 1}, false).code(),
            absl::StatusCode::kInvalidArgument);  // Twice: the options are the first row's.
  cache.Clear();  // The refusals leave nothing, as a refused step's server expects.
  EXPECT_EQ(resolve(6, {1}, false).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pagoda::worker
