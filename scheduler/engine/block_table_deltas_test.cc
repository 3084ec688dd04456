// BlockTableDeltas against the protocol's rule: randomized tables that
// change in every way the scheduler changes them (growth, copy-on-write of
// the last block, swap-in remapping, recompute with a prefix-cache hit,
// forks, speculative rollback, sequences that sit out, finished ones, step
// ids that skip, failures) are sent as deltas and resolved the way a worker
// must resolve them; every resolved table must be the whole one. The same
// for SamplingDeltas: a row leaves its options out exactly when the worker
// keeps identical ones from the step before.

#include "scheduler/engine/block_table_deltas.h"

#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/sampling_limits.h"

#include "gtest/gtest.h"
#include "scheduler/engine/sampling_deltas.h"

namespace pagoda::scheduler {
namespace {

using Table = std::vector<int>;

// What a worker keeps: the whole tables of the last step it ran.
struct ReferenceWorker {
  std::map<int64_t, Table> tables;
  int64_t step_id = -100;

  // The whole table of a row (start, entries) of plan `step`, or nothing
  // when the rule forbids the delta.
  std::optional<Table> Resolve(int64_t step, int64_t seq_id, int start, const Table& entries) {
    Table table;
    if (start > 0) {
      auto kept = tables.find(seq_id);
      if (step_id != step - 1 || kept == tables.end() ||
          static_cast<int>(kept->second.size()) < start) {
        return std::nullopt;
      }
      table.assign(kept->second.begin(), kept->second.begin() + start);
    }
    table.insert(table.end(), entries.begin(), entries.end());
    return table;
  }
};

// One random change of `table`, as the scheduler might make it.
void ChangeTable(std::mt19937& rng, int* next_block, Table* table) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  switch (uniform(0, 7)) {
    case 0:  // Copy-on-write of the last block.
      if (!table->empty()) table->back() = (*next_block)++;
      break;
    case 1:  // Swapped out and back in: every block moves.
      for (int& block : *table) block = (*next_block)++;
      break;
    case 2: {  // Recomputed: a prefix-cache hit keeps some, then new ones.
      table->resize(uniform(0, static_cast<int>(table->size())));
      const int more = uniform(1, 4);
      for (int i = 0; i < more; ++i) table->push_back((*next_block)++);
      break;
    }
    case 3:  // Speculative rollback: the table shrinks.
      table->resize(std::max(0, static_cast<int>(table->size()) - uniform(1, 3)));
      break;
    case 4:  // Unchanged (a decode within its last block).
      break;
    default:  // Growth: a decode or a prefill chunk.
      for (int i = uniform(1, 3); i > 0; --i) table->push_back((*next_block)++);
  }
}

TEST(BlockTableDeltasTest, RandomizedTablesResolveToTheWholeTables) {
  std::mt19937 rng(47);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  BlockTableDeltas deltas;
  ReferenceWorker worker;
  std::map<int64_t, Table> live;
  int next_block = 0;
  int64_t next_seq = 1;
  int64_t step_id = 0;
  int delta_rows = 0, shrunk_rows = 0;
  for (int iteration = 0; iteration < 400; ++iteration) {
    step_id += uniform(0, 9) == 0 ? 2 : 1;  // A step id skipped: whole tables.
    if (uniform(0, 19) == 0) {              // A failed step, a worker restart.
      deltas.Reset();
      worker.tables.clear();
    }
    while (live.size() < 12) live[next_seq++] = Table{next_block++};
    if (uniform(0, 3) == 0) {  // A fork: n > 1 or a beam, sharing the table.
      const auto& parent = *std::next(live.begin(), uniform(0, static_cast<int>(live.size()) - 1));
      live[next_seq++] = parent.second;
    }
    if (uniform(0, 3) == 0) live.erase(std::next(live.begin(), uniform(0, 5)));  // Finished.
    std::map<int64_t, Table> ran;
    deltas.BeginPlan(step_id);
    for (auto& [seq_id, table] : live) {
      if (uniform(0, 5) == 0) continue;  // Sits out (preempted, or waits).
      const size_t before = table.size();
      ChangeTable(rng, &next_block, &table);
      const int start = deltas.StartFor(seq_id, table);
      ASSERT_GE(start, 0);
      ASSERT_LE(start, static_cast<int>(table.size()));
      const Table entries(table.begin() + start, table.end());
      std::optional<Table> resolved = worker.Resolve(step_id, seq_id, start, entries);
      ASSERT_TRUE(resolved.has_value()) << "step " << step_id << " seq " << seq_id;
      EXPECT_EQ(*resolved, table) << "step " << step_id << " seq " << seq_id;
      delta_rows += start > 0;
      shrunk_rows += start > 0 && table.size() < before && entries.empty();
      ran[seq_id] = *resolved;
    }
    worker.tables = std::move(ran);
    worker.step_id = step_id;
  }
  EXPECT_GT(delta_rows, 1000);
  EXPECT_GT(shrunk_rows, 0);
}

TEST(BlockTableDeltasTest, OnlyTheStepAfterTheLastPlanExtendsIt) {
  BlockTableDeltas deltas;
  const Table table = {4, 5, 6};
  deltas.BeginPlan(7);
  EXPECT_EQ(deltas.StartFor(1, table), 0);  // Nothing sent before.
  deltas.BeginPlan(8);
  EXPECT_EQ(deltas.StartFor(1, {4, 5, 6, 9}), 3);
  EXPECT_EQ(deltas.StartFor(2, table), 0);  // Not in step 7.
  deltas.BeginPlan(10);                     // Step 9 was never planned.
  EXPECT_EQ(deltas.StartFor(1, {4, 5, 6, 9}), 0);
  deltas.BeginPlan(11);
  EXPECT_EQ(deltas.StartFor(1, {4, 8, 6, 9}), 1);  // Copy-on-write in the middle.
  deltas.Reset();
  deltas.BeginPlan(12);
  EXPECT_EQ(deltas.StartFor(1, {4, 8, 6, 9}), 0);  // After a failure: whole.
  deltas.BeginPlan(13);
  EXPECT_EQ(deltas.StartFor(1, {4, 8}), 2);  // Rollback: no entries.
}

// One random change of a row's options between steps, as a server's would.
void ChangeOptions(std::mt19937& rng, pagoda::worker::v1::SamplingOptions* options) {
  switch (std::uniform_int_distribution<int>(0, 11)(rng)) {
    case 0:  // min_tokens reached: the EOS ban is lifted.
      options->clear_banned_token_ids();
      break;
    case 1:  // A multi-token bad word's prefix: a ban for this step.
      options->add_banned_token_ids(7);
      break;
    case 2:  // Penalties: counts that grow from now on.
      options->add_output_token_ids(1);
      options->add_output_token_counts(1);
      break;
    case 3:  // -0 is not 0 to the bytes: sent, never wrongly left out.
      options->set_min_p(options->min_p() == 0.0f ? -0.0f : 0.0f);
      break;
    case 4:  // A beam's processed logprobs.
      options->set_processed_logprobs(!options->processed_logprobs());
      break;
    case 5:  // A recompute's prompt chunk: no logits processing.
      options->clear_output_token_ids();
      options->clear_output_token_counts();
      break;
    default:
      if (options->output_token_ids_size() > 0) {
        options->add_output_token_ids(options->output_token_ids_size() + 1);
        options->add_output_token_counts(1);
      }
  }
}

// Every field of SamplingOptions, changed alone, makes options differ.
TEST(BlockTableDeltasTest, SameSamplingOptionsComparesEveryField) {
  using google::protobuf::FieldDescriptor;
  const pagoda::worker::v1::SamplingOptions base;
  const auto* descriptor = pagoda::worker::v1::SamplingOptions::descriptor();
  const auto* reflection = pagoda::worker::v1::SamplingOptions::GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    pagoda::worker::v1::SamplingOptions changed;
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_FLOAT:
        field->is_repeated() ? reflection->AddFloat(&changed, field, -0.0f)
                             : reflection->SetFloat(&changed, field, -0.0f);
        break;
      case FieldDescriptor::CPPTYPE_INT32:
        field->is_repeated() ? reflection->AddInt32(&changed, field, 3)
                             : reflection->SetInt32(&changed, field, 3);
        break;
      case FieldDescriptor::CPPTYPE_UINT64:
        reflection->SetUInt64(&changed, field, 3);
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        reflection->SetBool(&changed, field, true);
        break;
      case FieldDescriptor::CPPTYPE_STRING:
        reflection->SetString(&changed, field, "x");
        break;
      default:
        FAIL() << field->name() << ": a field type this test does not change";
    }
    EXPECT_FALSE(SameSamplingOptions(base, changed)) << field->name();
    EXPECT_TRUE(SameSamplingOptions(changed, changed)) << field->name();
  }
  SamplingDeltas deltas;  // Its constructor checks the field count.
}

TEST(BlockTableDeltasTest, RandomizedSamplingLeftOutExactlyWhenTheWorkerKeepsIt) {
  std::mt19937 rng(4747);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  SamplingDeltas deltas;
  std::map<int64_t, std::string> kept;  // The worker's: its last step's options.
  int64_t kept_step = -100, step_id = 0, next_seq = 1;
  std::map<int64_t, pagoda::worker::v1::SamplingOptions> live;
  int unchanged_rows = 0;
  for (int iteration = 0; iteration < 300; ++iteration) {
    step_id += uniform(0, 9) == 0 ? 2 : 1;
    if (uniform(0, 19) == 0) {  // A failed step, a worker restart.
      deltas.Reset();
      kept.clear();
    }
    while (live.size() < 10) {
      pagoda::worker::v1::SamplingOptions& options = live[next_seq++];
      options.set_temperature(0.5f);
      options.set_seed(static_cast<uint64_t>(next_seq));
      options.add_banned_token_ids(2);
    }
    if (uniform(0, 3) == 0) live[next_seq++] = live.begin()->second;  // A fork.
    if (uniform(0, 3) == 0) live.erase(live.begin());                 // Finished.
    std::map<int64_t, std::string> ran;
    deltas.BeginPlan(step_id);
    for (auto& [seq_id, options] : live) {
      if (uniform(0, 5) == 0) continue;  // Sits out.
      ChangeOptions(rng, &options);
      const std::string bytes = options.SerializeAsString();
      auto it = kept.find(seq_id);
      const bool repeatable = kept_step == step_id - 1 && it != kept.end() && it->second == bytes;
      EXPECT_EQ(deltas.Unchanged(seq_id, options), repeatable)
          << "step " << step_id << " seq " << seq_id;
      unchanged_rows += repeatable;
      if (options.output_token_ids_size() == 0) ran[seq_id] = bytes;
    }
    kept = std::move(ran);
    kept_step = step_id;
  }
  EXPECT_GT(unchanged_rows, 500);
}

// Penalty rows against a reference worker that keeps each row's whole
// options and grows them by the rule of SequenceStep.sampling_delta: the
// options a row resolves to are those the server would have sent whole, and
// the row sends a delta exactly when the rule lets it.
TEST(BlockTableDeltasTest, RandomizedPenaltyRowsGrowExactlyWhenTheRuleAllows) {
  namespace wv1 = ::pagoda::worker::v1;
  std::mt19937 rng(4748);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  // Counts as the worker holds them (a map: their order does not matter).
  using Counts = std::map<int32_t, int32_t>;
  struct Row {
    wv1::SamplingOptions light;        // This step's, bans included.
    const std::vector<int32_t>* prompt;  // The group's distinct prompt tokens.
    std::vector<int32_t> output;
  };
  const std::vector<int32_t> prompts[2] = {{1, 5, 9}, {1, 5, 9}};  // Equal, not the same.
  SamplingDeltas deltas;
  std::map<int64_t, Row> live;
  // The reference worker: per row of the last step it ran, the options
  // without bans, the prompt and the counts.
  struct Kept {
    std::string light;
    const std::vector<int32_t>* prompt;
    Counts counts;
  };
  std::map<int64_t, Kept> kept;
  // What the server sent each row last (its light options, prompt, output
  // length), for the rule's expectation.
  std::map<int64_t, std::tuple<std::string, const std::vector<int32_t>*, size_t>> sent;
  int64_t kept_step = -100, step_id = 0, next_seq = 1;
  int grown_rows = 0, delta_rows = 0;
  auto unbanned = [](const wv1::SamplingOptions& light) {
    wv1::SamplingOptions copy = light;
    copy.clear_banned_token_ids();
    return copy.SerializeAsString();
  };
  for (int iteration = 0; iteration < 400; ++iteration) {
    step_id += uniform(0, 9) == 0 ? 2 : 1;
    if (uniform(0, 19) == 0) {  // A failed step, a worker restart.
      deltas.Reset();
      kept.clear();
      sent.clear();
    }
    while (live.size() < 10) {
      Row& row = live[next_seq++];
      row.light.set_repetition_penalty(1.25f);
      row.light.set_presence_penalty(0.5f);
      row.light.set_seed(static_cast<uint64_t>(next_seq));
      row.prompt = &prompts[0];
    }
    if (uniform(0, 3) == 0) live[next_seq++] = live.begin()->second;  // A fork: a new id.
    if (uniform(0, 3) == 0) live.erase(live.begin());                 // Finished.
    std::map<int64_t, Kept> ran;
    decltype(sent) now_sent;
    deltas.BeginPlan(step_id);
    for (auto& [seq_id, row] : live) {
      if (uniform(0, 5) == 0) continue;  // Sits out (preempted, waiting).
      // The tokens learned since the last plan: none (a placeholder, a
      // prefill chunk), one, accepted drafts, or more than a delta takes.
      const int learned = uniform(0, 15) == 0 ? kMaxAppendedOutputTokens + uniform(1, 3)
                                              : uniform(0, 3);
      for (int i = 0; i < learned; ++i) row.output.push_back(uniform(0, 20));
      switch (uniform(0, 15)) {
        case 0:  // min_tokens reached: the EOS ban is lifted.
          row.light.clear_banned_token_ids();
          break;
        case 1:  // A bad word's prefix: a ban this step.
          row.light.add_banned_token_ids(uniform(0, 20));
          break;
        case 2:  // -0 is not 0 to the bytes.
          row.light.set_min_p(row.light.min_p() == 0.0f ? -0.0f : 0.0f);
          break;
        case 3:  // Another source of equal prompt tokens.
          row.prompt = row.prompt == &prompts[0] ? &prompts[1] : &prompts[0];
          break;
        default:
          break;
      }
      const std::string light = unbanned(row.light);
      auto previous = sent.find(seq_id);
      const bool allowed = kept_step == step_id - 1 && previous != sent.end() &&
                           std::get<0>(previous->second) == light &&
                           std::get<1>(previous->second) == row.prompt &&
                           row.output.size() - std::get<2>(previous->second) <=
                               static_cast<size_t>(kMaxAppendedOutputTokens);
      int counted_before = -1;
      const bool grows = deltas.GrowsPenaltyRow(
          seq_id, row.light, PenaltySource{row.prompt, static_cast<int>(row.output.size())},
          &counted_before);
      EXPECT_EQ(grows, allowed) << "step " << step_id << " seq " << seq_id;
      Counts whole;
      for (int32_t token : row.output) ++whole[token];
      if (grows) {  // The worker grows what it kept.
        auto it = kept.find(seq_id);
        ASSERT_TRUE(kept_step == step_id - 1 && it != kept.end())
            << "step " << step_id << " seq " << seq_id << ": a delta the worker refuses";
        ASSERT_GE(counted_before, 0);
        ASSERT_LE(counted_before, static_cast<int>(row.output.size()));
        Counts counts = it->second.counts;
        for (size_t i = counted_before; i < row.output.size(); ++i) ++counts[row.output[i]];
        EXPECT_EQ(it->second.light, light) << "step " << step_id << " seq " << seq_id;
        EXPECT_EQ(it->second.prompt, row.prompt) << "step " << step_id << " seq " << seq_id;
        EXPECT_EQ(counts, whole) << "step " << step_id << " seq " << seq_id;
        ++delta_rows;
        grown_rows += counted_before < static_cast<int>(row.output.size());
      }
      ran[seq_id] = Kept{light, row.prompt, whole};
      now_sent[seq_id] = {light, row.prompt, row.output.size()};
    }
    kept = std::move(ran);
    sent = std::move(now_sent);
    kept_step = step_id;
  }
  EXPECT_GT(delta_rows, 1000);
  EXPECT_GT(grown_rows, 500);
}

}  // namespace
}  // namespace pagoda::scheduler
