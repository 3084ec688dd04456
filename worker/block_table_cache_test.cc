// BlockTableCache against the whole tables: randomized plans whose rows carry
// deltas by the protocol's rule (the prefix a row shares with its table of
// the step before, when that step ran here), through growth, copy-on-write,
// remapping, recompute, forks, rollback, rows that sit out, skipped step ids
// and failed steps; rows that repeat their sampling options
// (sampling_unchanged) through options that change, plans on an arena and
// on the heap; penalty rows that send only their new output tokens and bans
// (sampling_delta) against the whole options; and each refusal the rules
// make.

#include "worker/block_table_cache.h"

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/sampling_limits.h"
#include "google/protobuf/arena.h"
#include "gtest/gtest.h"
#include "tests/support/canonical_sampling_options.h"

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
  AddRow(&first, 2, 0, {2})->mutable_sampling()->add_output_token_ids(9);  // Kept too.
  ASSERT_TRUE(cache.Resolve(&first).ok());
  cache.Commit();
  ASSERT_NE(cache.FindSampling(1), nullptr);
  ASSERT_NE(cache.FindSampling(2), nullptr);

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
  EXPECT_EQ(resolve(6, {1}, true).code(), absl::StatusCode::kInvalidArgument);   // Given too.
  EXPECT_EQ(resolve(6, {1, 1}, false).code(),
            absl::StatusCode::kInvalidArgument);  // Twice: the options are the first row's.
  cache.Clear();  // The refusals leave nothing, as a refused step's server expects.
  EXPECT_EQ(resolve(6, {1}, false).code(), absl::StatusCode::kInvalidArgument);
}

// A penalty row as a server sees it: its options but for the counts, and
// its output so far.
struct PenaltyRow {
  v1::SamplingOptions light;  // With prompt_token_ids and this step's bans.
  std::vector<int32_t> output;

  // The whole options: the counts of the output, in an order of their own
  // (descending ids), as a hash map would list them.
  v1::SamplingOptions Whole() const {
    std::map<int32_t, int32_t, std::greater<>> counts;
    for (int32_t token : output) ++counts[token];
    v1::SamplingOptions whole = light;
    for (const auto& [id, count] : counts) {
      whole.add_output_token_ids(id);
      whole.add_output_token_counts(count);
    }
    return whole;
  }
};

TEST(BlockTableCacheTest, RandomizedSamplingDeltasResolveToTheWholeOptions) {
  std::mt19937 rng(4747);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  BlockTableCache cache;
  cache.Reset(1 << 20);
  std::map<int64_t, PenaltyRow> truth;
  // What the server sent in the last plan the worker ran: the light options
  // and how many output tokens they counted.
  std::map<int64_t, std::pair<std::string, size_t>> sent;
  int64_t sent_step = -10, step_id = 0, next_seq = 1;
  int delta_rows = 0, grown_rows = 0;
  for (int iteration = 0; iteration < 400; ++iteration) {
    step_id += uniform(0, 9) == 0 ? 2 : 1;
    while (truth.size() < 8) {
      PenaltyRow& row = truth[next_seq++];
      row.light.set_seed(static_cast<uint64_t>(next_seq));
      row.light.set_repetition_penalty(1.25f);
      row.light.set_frequency_penalty(0.5f);
      for (int i = 0; i < 40; ++i) row.light.add_prompt_token_ids(uniform(0, 500));
    }
    if (uniform(0, 4) == 0) truth[next_seq++] = truth.begin()->second;  // A fork: a new id.
    if (uniform(0, 4) == 0) truth.erase(truth.begin());                 // Finished.
    google::protobuf::Arena arena;
    v1::StepPlan heap_plan;
    v1::StepPlan& plan = iteration % 2 == 0
                             ? heap_plan
                             : *google::protobuf::Arena::CreateMessage<v1::StepPlan>(&arena);
    plan.set_step_id(step_id);
    std::map<int64_t, std::pair<std::string, size_t>> in_plan;
    for (auto& [seq_id, row] : truth) {
      if (uniform(0, 5) == 0) continue;  // Sits out.
      // A step's tokens (drafts accepted too), sometimes more than a delta
      // may append, sometimes repeats of earlier ones.
      const int appended = uniform(0, 12) == 0 ? kMaxAppendedOutputTokens + 1 : uniform(0, 3);
      for (int i = 0; i < appended; ++i) {
        row.output.push_back(row.output.empty() || uniform(0, 1)
                                 ? uniform(0, 60)
                                 : row.output[uniform(0, 2) % row.output.size()]);
      }
      if (uniform(0, 3) == 0) {  // This step's bans.
        row.light.clear_banned_token_ids();
        for (int i = uniform(0, 2); i > 0; --i) row.light.add_banned_token_ids(uniform(0, 60));
      }
      if (uniform(0, 30) == 0) row.light.set_temperature(row.light.temperature() + 0.5f);
      v1::SamplingOptions unbanned = row.light;
      unbanned.clear_banned_token_ids();
      const std::string light_bytes = unbanned.SerializeAsString();
      v1::SequenceStep* step = AddRow(&plan, seq_id, 0, {1});
      auto it = sent.find(seq_id);
      if (sent_step == step_id - 1 && it != sent.end() && it->second.first == light_bytes &&
          row.output.size() - it->second.second <= kMaxAppendedOutputTokens) {
        v1::SamplingDelta* delta = step->mutable_sampling_delta();
        *delta->mutable_banned_token_ids() = row.light.banned_token_ids();
        delta->mutable_appended_output_token_ids()->Add(row.output.begin() + it->second.second,
                                                        row.output.end());
        ++delta_rows;
        grown_rows += row.output.size() > it->second.second;
      } else {
        *step->mutable_sampling() = row.Whole();
      }
      in_plan[seq_id] = {light_bytes, row.output.size()};
    }
    ASSERT_TRUE(cache.Resolve(&plan).ok()) << "step " << step_id;
    for (const v1::SequenceStep& step : plan.sequences()) {
      EXPECT_FALSE(step.has_sampling_delta());
      EXPECT_EQ(CanonicalSamplingOptions(step.sampling()),
                CanonicalSamplingOptions(truth[step.seq_id()].Whole()))
          << "step " << step_id << ", sequence " << step.seq_id();
    }
    if (uniform(0, 14) == 0) {  // The step failed: the worker drops every row.
      cache.Clear();
      sent_step = -10;
      continue;
    }
    cache.Commit();
    sent = std::move(in_plan);
    sent_step = step_id;
  }
  EXPECT_GT(delta_rows, 1000);
  EXPECT_GT(grown_rows, 500);
}

TEST(BlockTableCacheTest, RefusesSamplingDeltasTheRuleDoesNotAllow) {
  BlockTableCache cache;
  cache.Reset(/*max_table_blocks=*/8);
  v1::StepPlan first;
  first.set_step_id(5);
  v1::SamplingOptions* kept = AddRow(&first, 1, 0, {1})->mutable_sampling();
  kept->set_repetition_penalty(1.5f);
  kept->add_prompt_token_ids(4);
  kept->add_output_token_ids(9);
  kept->add_output_token_counts(2);
  v1::SamplingOptions* unpaired = AddRow(&first, 2, 0, {2})->mutable_sampling();
  unpaired->add_output_token_ids(9);  // A row that did not sample: kept unchecked.
  ASSERT_TRUE(cache.Resolve(&first).ok());
  cache.Commit();

  enum class Also { kNothing, kSampling, kUnchanged };
  auto resolve = [&](int64_t step_id, std::vector<int64_t> seq_ids, Also also, int appended) {
    v1::StepPlan plan;
    plan.set_step_id(step_id);
    for (int64_t seq_id : seq_ids) {
      v1::SequenceStep* row = AddRow(&plan, seq_id, 0, {1});
      for (int i = 0; i < appended; ++i)
        row->mutable_sampling_delta()->add_appended_output_token_ids(9);
      row->mutable_sampling_delta()->add_banned_token_ids(3);
      if (also == Also::kSampling) row->mutable_sampling()->set_repetition_penalty(1.5f);
      if (also == Also::kUnchanged) row->set_sampling_unchanged(true);
    }
    return cache.Resolve(&plan);
  };
  // The server resends whole options after a refusal; so does this test.
  auto start_over = [&] {
    cache.Clear();
    ASSERT_TRUE(cache.Resolve(&first).ok());
    cache.Commit();
  };
  const absl::Status not_chained = resolve(7, {1}, Also::kNothing, 1);
  EXPECT_EQ(not_chained.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(not_chained.message().find("sequence 1: sampling_delta"), std::string::npos)
      << not_chained;
  start_over();
  for (const auto& [seq_ids, also, appended, why] :
       {std::tuple{std::vector<int64_t>{3}, Also::kNothing, 1, "not in step 5"},
        std::tuple{std::vector<int64_t>{1}, Also::kSampling, 1, "options given too"},
        std::tuple{std::vector<int64_t>{1}, Also::kUnchanged, 1, "sampling_unchanged too"},
        std::tuple{std::vector<int64_t>{1}, Also::kNothing, kMaxAppendedOutputTokens + 1,
                   "too many appended"},
        std::tuple{std::vector<int64_t>{1, 1}, Also::kNothing, 1, "twice: the first took them"},
        std::tuple{std::vector<int64_t>{2}, Also::kNothing, 1, "counts without ids"}}) {
    const absl::Status refused = resolve(6, seq_ids, also, appended);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << why;
    EXPECT_NE(refused.message().find(absl::StrCat("sequence ", seq_ids.back())), std::string::npos)
        << why << ": " << refused;
    start_over();
  }
  // The rule allows the same delta: the counts grow, the bans are replaced.
  v1::StepPlan allowed;
  allowed.set_step_id(6);
  v1::SamplingDelta* delta = AddRow(&allowed, 1, 0, {1})->mutable_sampling_delta();
  delta->add_appended_output_token_ids(9);
  delta->add_appended_output_token_ids(11);
  delta->add_banned_token_ids(3);
  ASSERT_TRUE(cache.Resolve(&allowed).ok());
  const v1::SamplingOptions& resolved = allowed.sequences(0).sampling();
  EXPECT_FLOAT_EQ(resolved.repetition_penalty(), 1.5f);
  EXPECT_EQ(
      std::vector<int32_t>(resolved.prompt_token_ids().begin(), resolved.prompt_token_ids().end()),
      std::vector<int32_t>({4}));
  EXPECT_EQ(
      std::vector<int32_t>(resolved.output_token_ids().begin(), resolved.output_token_ids().end()),
      std::vector<int32_t>({9, 11}));
  EXPECT_EQ(std::vector<int32_t>(resolved.output_token_counts().begin(),
                                 resolved.output_token_counts().end()),
            std::vector<int32_t>({3, 1}));
  EXPECT_EQ(
      std::vector<int32_t>(resolved.banned_token_ids().begin(), resolved.banned_token_ids().end()),
      std::vector<int32_t>({3}));
}

}  // namespace
}  // namespace pagoda::worker
