// Drives the scheduler core the way the engine loop does (Schedule ->
// BuildStepPlan -> worker -> ExtractSampledTokens -> OutputProcessor ->
// FreeFinished) against a fake worker that keeps real per-slot "KV" contents
// and reads context back only through the plan's block tables. Any wrong
// table, lost swap, missing copy-on-write or bad recompute changes the tokens.
// The plans send block-table deltas (BlockTableDeltas), which the fake
// worker resolves by the protocol's rule, so a wrong delta does too.

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/sampling_limits.h"
#include "glog/logging.h"
#include "gtest/gtest.h"
#include "pagoda/worker/v1/worker.pb.h"
#include "scheduler/engine/output_processor.h"
#include "scheduler/engine/scheduler.h"
#include "scheduler/engine/step_plan.h"
#include "tests/support/canonical_sampling_options.h"

namespace pagoda::scheduler {
namespace {

namespace wv1 = ::pagoda::worker::v1;

constexpr int kVocab = 64;
constexpr int32_t kEmptySlot = -1;
const absl::Time kEpoch = absl::FromUnixSeconds(1'000'000);

// The "model": the next token is a hash of the whole context.
int32_t NextToken(const std::vector<int32_t>& context) {
  uint64_t hash = 1469598103934665603ull;
  for (int32_t token : context) {
    hash ^= static_cast<uint64_t>(token) + 0x9e3779b97f4a7c15ull;
    hash *= 1099511628211ull;
  }
  return static_cast<int32_t>((hash >> 17) % kVocab);
}

// A worker that owns only "KV bytes": one token id per slot.
class FakeWorker {
 public:
  FakeWorker(int block_size, int num_gpu_blocks, int num_cpu_blocks)
      : block_size_(block_size),
        gpu_(num_gpu_blocks, std::vector<int32_t>(block_size, kEmptySlot)),
        cpu_(num_cpu_blocks, std::vector<int32_t>(block_size, kEmptySlot)) {}

  absl::StatusOr<wv1::StepResult> Execute(const wv1::StepPlan& plan) {
    for (const auto& move : plan.swap_out()) {
      if (!InRange(gpu_, move.src()) || !InRange(cpu_, move.dst())) return Bad("swap out");
      cpu_[move.dst()] = gpu_[move.src()];
    }
    for (const auto& move : plan.swap_in()) {
      if (!InRange(cpu_, move.src()) || !InRange(gpu_, move.dst())) return Bad("swap in");
      gpu_[move.dst()] = cpu_[move.src()];
    }
    for (const auto& move : plan.copy()) {
      if (!InRange(gpu_, move.src()) || !InRange(gpu_, move.dst())) return Bad("copy");
      gpu_[move.dst()] = gpu_[move.src()];
    }
    wv1::StepResult result;
    result.set_step_id(plan.step_id());
    std::map<int64_t, std::vector<int32_t>> tables;
    std::map<int64_t, wv1::SamplingOptions> sampling;
    resolved_sampling_.clear();
    for (const wv1::SequenceStep& step : plan.sequences()) {
      absl::StatusOr<std::vector<int32_t>> resolved = ResolveTable(plan.step_id(), step);
      if (!resolved.ok()) return resolved.status();
      absl::StatusOr<wv1::SamplingOptions> options = ResolveSampling(plan.step_id(), step);
      if (!options.ok()) return options.status();
      resolved_sampling_.push_back(CanonicalSamplingOptions(*options));
      sampling[step.seq_id()] = *std::move(options);
      const std::vector<int32_t>& table = tables[step.seq_id()] = *std::move(resolved);
      const int end = step.start_position() + step.token_ids_size();
      if (static_cast<int>(table.size()) * block_size_ < end) return Bad("table too short");
      for (int i = 0; i < step.token_ids_size(); ++i) {
        int32_t* slot = Slot(table, step.start_position() + i);
        if (slot == nullptr) return Bad("block out of range");
        *slot = step.token_ids(i);
      }
      if (!step.do_sample()) continue;
      std::vector<int32_t> context;
      for (int position = 0; position < end; ++position) {
        const int32_t* slot = Slot(table, position);
        if (slot == nullptr || *slot == kEmptySlot) return Bad("context slot never written");
        context.push_back(*slot);
      }
      wv1::SampledToken* token = result.add_tokens();
      token->set_seq_id(step.seq_id());
      token->set_token_id(NextToken(context));
      token->set_logprob(-0.25f);
    }
    tables_ = std::move(tables);
    sampling_ = std::move(sampling);
    tables_step_ = plan.step_id();
    return result;
  }

  // A failed step: the worker keeps no tables or options (row deltas).
  void ForgetTables() {
    tables_.clear();
    sampling_.clear();
  }

  int64_t delta_rows() const { return delta_rows_; }
  int64_t unchanged_sampling_rows() const { return unchanged_sampling_rows_; }
  int64_t grown_sampling_rows() const { return grown_sampling_rows_; }
  // The options of each row of the last plan, as resolved (CanonicalSamplingOptions).
  const std::vector<std::string>& resolved_sampling() const { return resolved_sampling_; }

 private:
  // The whole table of `step` by the block-table delta rule of
  // SequenceStep.block_table_start, against the tables of the last step.
  absl::StatusOr<std::vector<int32_t>> ResolveTable(int64_t step_id,
                                                    const wv1::SequenceStep& step) {
    const int start = step.block_table_start();
    std::vector<int32_t> table;
    if (start > 0) {
      auto kept = tables_.find(step.seq_id());
      if (tables_step_ != step_id - 1 || kept == tables_.end() ||
          static_cast<int>(kept->second.size()) < start) {
        return Bad("block_table_start without a table to extend");
      }
      table.assign(kept->second.begin(), kept->second.begin() + start);
      ++delta_rows_;
    }
    table.insert(table.end(), step.block_table().begin(), step.block_table().end());
    return table;
  }

  // The sampling options of `step` by the rules of
  // SequenceStep.sampling_unchanged and sampling_delta, against the options
  // of the last step.
  absl::StatusOr<wv1::SamplingOptions> ResolveSampling(int64_t step_id,
                                                       const wv1::SequenceStep& step) {
    if (!step.sampling_unchanged() && !step.has_sampling_delta()) return step.sampling();
    auto kept = sampling_.find(step.seq_id());
    if (tables_step_ != step_id - 1 || kept == sampling_.end() || step.has_sampling() ||
        (step.sampling_unchanged() && step.has_sampling_delta())) {
      return Bad("a sampling delta without options to grow");
    }
    if (step.sampling_unchanged()) {
      ++unchanged_sampling_rows_;
      return kept->second;
    }
    const wv1::SamplingDelta& delta = step.sampling_delta();
    if (delta.appended_output_token_ids_size() > kMaxAppendedOutputTokens) {
      return Bad("too many appended tokens");
    }
    std::map<int32_t, int32_t> counts;
    for (int i = 0; i < kept->second.output_token_ids_size(); ++i) {
      counts[kept->second.output_token_ids(i)] = kept->second.output_token_counts(i);
    }
    for (int32_t token : delta.appended_output_token_ids()) ++counts[token];
    wv1::SamplingOptions grown = kept->second;
    grown.clear_output_token_ids();
    grown.clear_output_token_counts();
    for (const auto& [id, count] : counts) {
      grown.add_output_token_ids(id);
      grown.add_output_token_counts(count);
    }
    *grown.mutable_banned_token_ids() = delta.banned_token_ids();
    ++grown_sampling_rows_;
    return grown;
  }

  static bool InRange(const std::vector<std::vector<int32_t>>& pool, int block) {
    return block >= 0 && block < static_cast<int>(pool.size());
  }
  static absl::Status Bad(const std::string& what) { return absl::InternalError(what); }
  int32_t* Slot(const std::vector<int32_t>& table, int position) {
    const int block = table[position / block_size_];
    if (!InRange(gpu_, block)) return nullptr;
    return &gpu_[block][position % block_size_];
  }

  int block_size_;
  std::vector<std::vector<int32_t>> gpu_;
  std::vector<std::vector<int32_t>> cpu_;
  std::map<int64_t, std::vector<int32_t>> tables_;    // Of step tables_step_.
  std::map<int64_t, wv1::SamplingOptions> sampling_;  // Of step tables_step_.
  int64_t tables_step_ = -2;
  int64_t delta_rows_ = 0;
  int64_t unchanged_sampling_rows_ = 0;
  int64_t grown_sampling_rows_ = 0;
  std::vector<std::string> resolved_sampling_;
};

struct SimRequest {
  std::string id;
  std::vector<int32_t> prompt;
  StoppingOptions stopping;
  int n = 1;  // Live sequences after the first token (forked).
  // Repetition, presence and frequency penalties: rows that send their
  // counts (the fake worker ignores them; the plans' options are checked).
  bool penalties = false;
  int arrival_step = 0;
};

struct SimResult {
  std::map<std::string, std::vector<std::vector<int32_t>>> outputs;
  std::map<std::string, std::vector<SequenceStatus>> statuses;
  std::vector<std::string> ignored;
  int recompute_preemptions = 0;
  int swap_preemptions = 0;
  int copies = 0;
  int64_t prefix_cache_hits = 0;
  int peak_used_gpu_blocks = 0;
  int free_gpu_at_end = 0;
  int free_cpu_at_end = 0;
  size_t tables_at_end = 0;
  int64_t delta_rows = 0;               // Rows whose block table was a delta.
  int64_t unchanged_sampling_rows = 0;  // Rows that left their options out.
  int64_t grown_sampling_rows = 0;      // Penalty rows that sent a SamplingDelta.
};

// What every step must satisfy: each entry continues its sequence where its
// K/V ends and samples exactly when it reaches the sequence's end; with
// chunked prefill, prompt chunks only spend what the decodes left of the
// token budget, and no group takes more than long_prefill_token_threshold.
void CheckStepInvariants(const SchedulerConfig& config, const SchedulerOutput& output) {
  int tokens = 0;
  std::map<const SequenceGroup*, int> chunk_tokens;
  for (const ScheduledSequence& entry : output.scheduled) {
    EXPECT_EQ(entry.start_position, entry.seq->num_computed_tokens());
    EXPECT_GE(entry.num_tokens, 1);
    EXPECT_LE(entry.start_position + entry.num_tokens, entry.seq->length());
    EXPECT_EQ(entry.do_sample, entry.start_position + entry.num_tokens == entry.seq->length());
    if (!entry.do_sample || entry.num_tokens > 1) chunk_tokens[entry.group] += entry.num_tokens;
    tokens += entry.num_tokens;
  }
  EXPECT_EQ(tokens, output.num_batched_tokens);
  if (!config.enable_chunked_prefill) {
    if (output.num_prefill_groups > 0) {
      EXPECT_LE(tokens, config.max_num_batched_tokens);
    }
    return;
  }
  const int decode_tokens = tokens - output.num_prefill_tokens;
  EXPECT_LE(output.num_prefill_tokens, std::max(0, config.max_num_batched_tokens - decode_tokens));
  std::set<const SequenceGroup*> left_partial;
  int long_left_partial = 0;  // Of those, prompts over long_prefill_token_threshold.
  for (const ScheduledSequence& entry : output.scheduled) {
    // A group of several sequences computes up to each last token in
    // chunks, then samples them together: reaching length - 1 ends its chunks.
    const bool together = entry.group->SeqsWithStatus(SequenceStatus::kRunning).size() > 1;
    const int end = entry.start_position + entry.num_tokens;
    if (!entry.do_sample && !(together && end == entry.seq->length() - 1) &&
        left_partial.insert(entry.group).second && config.long_prefill_token_threshold > 0 &&
        entry.seq->length() - entry.start_position > config.long_prefill_token_threshold) {
      ++long_left_partial;
    }
  }
  EXPECT_LE(long_left_partial, config.max_long_partial_prefills);
  EXPECT_LE(static_cast<int>(left_partial.size()), config.max_num_partial_prefills) << [&] {
    std::string dump;
    for (const ScheduledSequence& e : output.scheduled) {
      absl::StrAppend(&dump, e.group->request_id(), "/", e.seq->seq_id(), " start ",
                      e.start_position, " n ", e.num_tokens, " len ", e.seq->length(), " seqs ",
                      e.group->seqs().size(), "; ");
    }
    return dump;
  }();
  for (const auto& [group, group_tokens] : chunk_tokens) {
    if (config.long_prefill_token_threshold > 0) {
      EXPECT_LE(group_tokens, config.long_prefill_token_threshold);
    }
  }
}

SimResult RunEngine(const SchedulerConfig& config, const std::vector<SimRequest>& requests,
                    const std::vector<int32_t>& eos_token_ids) {
  SimResult sim;
  Scheduler scheduler(config);
  FakeWorker worker(config.block_size, config.num_gpu_blocks, config.num_cpu_blocks);
  BlockTableDeltas table_deltas;
  SamplingDeltas sampling_deltas;
  OutputProcessor processor(eos_token_ids, config.max_model_len, &scheduler);
  std::map<std::string, SequenceGroup*> live;
  std::map<int64_t, SequenceStatus> last_status;
  int64_t next_seq_id = 1;
  size_t next_request = 0;
  auto record = [&](const SequenceGroup& group) {
    auto& outputs = sim.outputs[group.request_id()];
    auto& statuses = sim.statuses[group.request_id()];
    for (const auto& seq : group.seqs()) {
      std::vector<int32_t> tokens;
      for (const GeneratedToken& token : seq->output()) tokens.push_back(token.token_id);
      outputs.push_back(tokens);
      statuses.push_back(seq->status());
    }
    live.erase(group.request_id());
  };
  for (int64_t step = 0; step < 20000; ++step) {
    while (next_request < requests.size() && requests[next_request].arrival_step <= step) {
      const SimRequest& request = requests[next_request++];
      SamplingOptions sampling;
      sampling.n = sampling.best_of = request.n;
      if (request.penalties) {
        sampling.repetition_penalty = 1.25f;
        sampling.presence_penalty = 0.5f;
        sampling.frequency_penalty = 0.25f;
      }
      auto group = std::make_unique<SequenceGroup>(
          request.id, request.prompt, next_seq_id++, sampling, request.stopping,
          kEpoch + absl::Milliseconds(static_cast<int64_t>(next_request)));
      live[request.id] = group.get();
      scheduler.AddSequenceGroup(std::move(group));
    }
    if (!scheduler.HasUnfinished() && next_request == requests.size()) break;

    SchedulerOutput output = scheduler.Schedule();
    for (const auto& group : output.ignored) {
      sim.ignored.push_back(group->request_id());
      record(*group);
    }
    for (const auto& [id, group] : live) {
      for (const auto& seq : group->seqs()) {
        auto [it, inserted] = last_status.try_emplace(seq->seq_id(), seq->status());
        if (!inserted && it->second == SequenceStatus::kRunning) {
          if (seq->status() == SequenceStatus::kWaiting) ++sim.recompute_preemptions;
          if (seq->status() == SequenceStatus::kSwapped) ++sim.swap_preemptions;
        }
        it->second = seq->status();
      }
    }
    sim.copies += static_cast<int>(output.blocks_to_copy.size());
    sim.peak_used_gpu_blocks =
        std::max(sim.peak_used_gpu_blocks,
                 config.num_gpu_blocks - scheduler.block_manager().num_free_gpu_blocks());
    CheckStepInvariants(config, output);
    if (output.empty()) continue;

    // Block-table deltas across everything the scheduler does (a step with
    // nothing scheduled skips a step id, which sends whole tables); every
    // 13th step fails for the tables, as a failed step would.
    if (step % 13 == 12) {
      table_deltas.Reset();
      sampling_deltas.Reset();
      worker.ForgetTables();
    }
    wv1::StepPlan plan;
    BuildStepPlanInto(step, output, scheduler.block_manager(), {}, &plan, &table_deltas,
                      &sampling_deltas);
    const wv1::StepPlan whole_plan = BuildStepPlan(step, output, scheduler.block_manager(), {});
    for (int i = 0; i < plan.sequences_size(); ++i) {
      const std::vector<int>& whole =
          scheduler.block_manager().GetBlockTable(plan.sequences(i).seq_id());
      const auto& sent = plan.sequences(i).block_table();
      EXPECT_TRUE(std::equal(whole.begin() + plan.sequences(i).block_table_start(), whole.end(),
                             sent.begin(), sent.end()));
    }
    absl::StatusOr<wv1::StepResult> result = worker.Execute(plan);
    EXPECT_TRUE(result.ok()) << result.status() << " at step " << step;
    if (!result.ok()) return sim;
    for (int i = 0; i < plan.sequences_size(); ++i) {  // The options the plan stood for.
      EXPECT_EQ(worker.resolved_sampling()[i],
                CanonicalSamplingOptions(whole_plan.sequences(i).sampling()))
          << "sequence " << plan.sequences(i).seq_id() << " at step " << step;
    }
    absl::StatusOr<std::vector<GeneratedToken>> sampled = ExtractSampledTokens(*result, output);
    EXPECT_TRUE(sampled.ok()) << sampled.status();
    if (!sampled.ok()) return sim;
    processor.Process(output, *sampled);
    scheduler.CommitComputedBlocks(output);
    for (const auto& group : scheduler.FreeFinished()) record(*group);
  }
  EXPECT_FALSE(scheduler.HasUnfinished()) << "engine did not drain";
  sim.free_gpu_at_end = scheduler.block_manager().num_free_gpu_blocks();
  sim.prefix_cache_hits = scheduler.block_manager().prefix_cache_hits();
  sim.free_cpu_at_end = scheduler.block_manager().num_free_cpu_blocks();
  sim.tables_at_end = scheduler.block_manager().block_tables().size();
  sim.delta_rows = worker.delta_rows();
  sim.unchanged_sampling_rows = worker.unchanged_sampling_rows();
  sim.grown_sampling_rows = worker.grown_sampling_rows();
  return sim;
}

SchedulerConfig Config(int gpu_blocks, int cpu_blocks, PreemptionMode mode) {
  SchedulerConfig config;
  config.block_size = 4;
  config.num_gpu_blocks = gpu_blocks;
  config.num_cpu_blocks = cpu_blocks;
  config.max_num_seqs = 16;
  config.max_num_batched_tokens = 160;
  config.max_model_len = 64;
  config.watermark = 0.01;
  config.preemption_mode = mode;
  return config;
}

// With `shared_prefix`, every prompt starts with the same 13 tokens (three
// full blocks of 4, then one token), so the prefix cache serves most of them.
std::vector<SimRequest> MixedRequests(int count, uint32_t seed, bool with_pairs,
                                      bool shared_prefix = false) {
  std::mt19937 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<SimRequest> requests;
  for (int i = 0; i < count; ++i) {
    SimRequest request;
    request.id = absl::StrCat("req", i);
    request.prompt.resize(uniform(1, 24));
    for (int32_t& token : request.prompt) token = uniform(0, kVocab - 1);
    if (shared_prefix) {
      std::vector<int32_t> prefix(13);
      std::iota(prefix.begin(), prefix.end(), 20);
      request.prompt.insert(request.prompt.begin(), prefix.begin(), prefix.end());
    }
    request.stopping.max_tokens = uniform(1, 30);
    request.stopping.ignore_eos = uniform(0, 3) == 0;
    if (uniform(0, 4) == 0) request.stopping.stop_token_ids = {uniform(0, kVocab - 1)};
    request.n = with_pairs && uniform(0, 2) == 0 ? 2 : 1;
    request.arrival_step = uniform(0, 40);
    request.penalties = i % 2 == 0;  // No draw: the scenarios stay as they were.
    requests.push_back(std::move(request));
  }
  std::stable_sort(requests.begin(), requests.end(),
                   [](const auto& a, const auto& b) { return a.arrival_step < b.arrival_step; });
  return requests;
}

struct SimCase {
  PreemptionMode mode;
  bool with_pairs;
  uint32_t seed;
  bool shared_prefix = false;
  bool prefix_caching = true;
};

class EngineSimTest : public ::testing::TestWithParam<SimCase> {};

TEST_P(EngineSimTest, EveryRequestMatchesItsSoloRunDespitePreemption) {
  const SimCase& param = GetParam();
  const std::vector<int32_t> eos = {3};
  const std::vector<SimRequest> requests =
      MixedRequests(40, param.seed, param.with_pairs, param.shared_prefix);
  // 24 GPU blocks of 4 tokens for 40 requests of up to 67 tokens each.
  SchedulerConfig tight = Config(/*gpu_blocks=*/24, /*cpu_blocks=*/20, param.mode);
  tight.enable_prefix_caching = param.prefix_caching;
  const SimResult crowded = RunEngine(tight, requests, eos);

  EXPECT_TRUE(crowded.ignored.empty());
  if (param.shared_prefix && param.prefix_caching) {
    EXPECT_GT(crowded.prefix_cache_hits, 0);
  }
  if (!param.prefix_caching) {
    EXPECT_EQ(crowded.prefix_cache_hits, 0);
  }
  EXPECT_EQ(crowded.free_gpu_at_end, 24);
  EXPECT_EQ(crowded.free_cpu_at_end, 20);
  EXPECT_EQ(crowded.tables_at_end, 0u);
  EXPECT_GT(crowded.delta_rows, 0);
  EXPECT_GT(crowded.unchanged_sampling_rows, 0);
  EXPECT_GT(crowded.grown_sampling_rows, 0);
  if (param.mode != PreemptionMode::kSwap) {
    EXPECT_GT(crowded.recompute_preemptions, 0);
  }
  if (param.mode != PreemptionMode::kRecompute && param.with_pairs) {
    EXPECT_GT(crowded.swap_preemptions, 0);
  }
  if (param.with_pairs) {
    EXPECT_GT(crowded.copies, 0);
  }
  LOG(INFO) << "preemptions: " << crowded.recompute_preemptions << " recompute, "
            << crowded.swap_preemptions << " swap; " << crowded.copies << " copies";

  const SchedulerConfig roomy = Config(/*gpu_blocks=*/64, /*cpu_blocks=*/0, param.mode);
  for (SimRequest request : requests) {
    request.arrival_step = 0;
    const SimResult solo = RunEngine(roomy, {request}, eos);
    ASSERT_EQ(solo.recompute_preemptions + solo.swap_preemptions, 0);
    EXPECT_EQ(crowded.outputs.at(request.id), solo.outputs.at(request.id)) << request.id;
    EXPECT_EQ(crowded.statuses.at(request.id), solo.statuses.at(request.id)) << request.id;
    // A pair forks at its first token, even when that token finishes it.
    EXPECT_EQ(static_cast<int>(solo.outputs.at(request.id).size()), request.n) << request.id;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, EngineSimTest,
                         ::testing::Values(SimCase{PreemptionMode::kAuto, true, 1},
                                           SimCase{PreemptionMode::kAuto, true, 2},
                                           SimCase{PreemptionMode::kAuto, false, 3},
                                           SimCase{PreemptionMode::kRecompute, true, 4},
                                           SimCase{PreemptionMode::kSwap, false, 5},
                                           SimCase{PreemptionMode::kSwap, true, 6},
                                           SimCase{PreemptionMode::kAuto, true, 7, true},
                                           SimCase{PreemptionMode::kRecompute, false, 8, true},
                                           SimCase{PreemptionMode::kSwap, true, 9, true},
                                           SimCase{PreemptionMode::kAuto, true, 10, true, false}));

TEST(ParallelSamplingTest, FourSamplesHoldFewerBlocksThanFourRequests) {
  SchedulerConfig config = Config(/*gpu_blocks=*/64, /*cpu_blocks=*/0, PreemptionMode::kAuto);
  config.enable_prefix_caching = false;  // Sharing by fork only.
  std::vector<int32_t> prompt(18);
  std::iota(prompt.begin(), prompt.end(), 5);
  StoppingOptions stopping;
  stopping.max_tokens = 8;
  stopping.ignore_eos = true;
  SimRequest group{"group", prompt, stopping, /*n=*/4};
  std::vector<SimRequest> separate;
  for (int i = 0; i < 4; ++i)
    separate.push_back(SimRequest{absl::StrCat("solo", i), prompt, stopping});
  const SimResult shared = RunEngine(config, {group}, {});
  const SimResult apart = RunEngine(config, separate, {});
  ASSERT_EQ(shared.outputs.at("group").size(), 4u);
  // Up to 25 tokens in the cache = 7 blocks each: apart 4 x 7 = 28. Shared:
  // the 4 full prompt blocks + 3 own blocks (from the partial 5th, copied
  // on write) for the first sample and 2 for the other three, which start a
  // step later; by the time they need a 3rd, the first has finished: 13.
  EXPECT_EQ(apart.peak_used_gpu_blocks, 28);
  EXPECT_EQ(shared.peak_used_gpu_blocks, 13);
  EXPECT_EQ(shared.copies, 3);  // Each child copies the prompt's partial last block.
  EXPECT_EQ(shared.free_gpu_at_end, 64);
}

// ---------------------------------------------------------------------------
// Stop conditions, each against the unstopped stream of the fake model.

class StopConditionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A prompt whose first 8 generated tokens are distinct, so each stop rule
    // can be pinned to one position.
    for (int32_t first = 0;; ++first) {
      prompt_ = {first, 5, 9};
      stream_.clear();
      std::vector<int32_t> context = prompt_;
      for (int i = 0; i < 8; ++i) {
        stream_.push_back(NextToken(context));
        context.push_back(stream_.back());
      }
      std::vector<int32_t> sorted = stream_;
      std::sort(sorted.begin(), sorted.end());
      if (std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) break;
    }
  }

  // Runs one request; returns its tokens and sets `status`.
  std::vector<int32_t> Run(StoppingOptions stopping, const std::vector<int32_t>& eos,
                           SequenceStatus* status, int max_model_len = 64) {
    SchedulerConfig config = Config(32, 0, PreemptionMode::kAuto);
    config.max_model_len = max_model_len;
    SimRequest request{"stop", prompt_, std::move(stopping)};
    SimResult result = RunEngine(config, {request}, eos);
    *status = result.statuses.at("stop")[0];
    return result.outputs.at("stop")[0];
  }

  std::vector<int32_t> First(int count) const {
    return std::vector<int32_t>(stream_.begin(), stream_.begin() + count);
  }

  std::vector<int32_t> prompt_;
  std::vector<int32_t> stream_;  // s[0] is the first generated token.
};

TEST_F(StopConditionTest, EosStops) {
  SequenceStatus status;
  StoppingOptions stopping;
  stopping.max_tokens = 8;
  EXPECT_EQ(Run(stopping, {stream_[2]}, &status), First(3));
  EXPECT_EQ(status, SequenceStatus::kFinishedStopped);
}

TEST_F(StopConditionTest, IgnoreEosRunsToMaxTokens) {
  SequenceStatus status;
  StoppingOptions stopping;
  stopping.max_tokens = 8;
  stopping.ignore_eos = true;
  EXPECT_EQ(Run(stopping, {stream_[2]}, &status), First(8));
  EXPECT_EQ(status, SequenceStatus::kFinishedLength);
}

TEST_F(StopConditionTest, MinTokensMasksEosAndStopIdsUntilReached) {
  SequenceStatus status;
  StoppingOptions stopping;
  stopping.max_tokens = 8;
  stopping.min_tokens = 4;
  stopping.stop_token_ids = {stream_[0], stream_[4]};
  EXPECT_EQ(Run(stopping, {stream_[1]}, &status), First(5));
  EXPECT_EQ(status, SequenceStatus::kFinishedStopped);
  // The token that reaches min_tokens may itself stop.
  stopping.min_tokens = 2;
  stopping.stop_token_ids = {};
  EXPECT_EQ(Run(stopping, {stream_[1]}, &status), First(2));
  EXPECT_EQ(status, SequenceStatus::kFinishedStopped);
}

TEST_F(StopConditionTest, StopTokenIdsStop) {
  SequenceStatus status;
  StoppingOptions stopping;
  stopping.max_tokens = 8;
  stopping.stop_token_ids = {stream_[6], stream_[3]};
  EXPECT_EQ(Run(stopping, {}, &status), First(4));
  EXPECT_EQ(status, SequenceStatus::kFinishedStopped);
}

TEST_F(StopConditionTest, MaxTokensStops) {
  SequenceStatus status;
  StoppingOptions stopping;
  stopping.max_tokens = 6;
  EXPECT_EQ(Run(stopping, {}, &status), First(6));
  EXPECT_EQ(status, SequenceStatus::kFinishedLength);
}

TEST_F(StopConditionTest, MaxModelLenStops) {
  SequenceStatus status;
  StoppingOptions stopping;
  stopping.max_tokens = 8;
  // 3 prompt tokens + 4 generated = 7 = max_model_len.
  EXPECT_EQ(Run(stopping, {}, &status, /*max_model_len=*/7), First(4));
  EXPECT_EQ(status, SequenceStatus::kFinishedLength);
}

TEST_F(StopConditionTest, EosWinsOverMaxTokensOnTheSameToken) {
  SequenceStatus status;
  StoppingOptions stopping;
  stopping.max_tokens = 3;
  EXPECT_EQ(Run(stopping, {stream_[2]}, &status), First(3));
  EXPECT_EQ(status, SequenceStatus::kFinishedStopped);
}

}  // namespace
}  // namespace pagoda::scheduler

namespace pagoda::scheduler {
namespace {

struct ChunkCase {
  int budget;
  PreemptionMode mode;
  bool with_pairs;
  bool shared_prefix;
  int max_num_partial_prefills = 1;
  int long_prefill_token_threshold = 0;
  int max_long_partial_prefills = 1;
};

class ChunkedPrefillSimTest : public ::testing::TestWithParam<ChunkCase> {};

// Chunking changes which tokens a step computes, never the tokens: every
// request of a crowded run with chunked prefill (with preemption, forks and
// prefix hits) matches its solo run with whole prompts, and prompts longer
// than the budget are served.
TEST_P(ChunkedPrefillSimTest, OutputsMatchWholePromptRunsAtEveryBudget) {
  const ChunkCase& param = GetParam();
  const std::vector<int32_t> eos = {3};
  const std::vector<SimRequest> requests =
      MixedRequests(30, 100 + param.budget, param.with_pairs, param.shared_prefix);
  SchedulerConfig chunked = Config(/*gpu_blocks=*/24, /*cpu_blocks=*/20, param.mode);
  chunked.enable_chunked_prefill = true;
  chunked.max_num_batched_tokens = param.budget;
  chunked.max_num_partial_prefills = param.max_num_partial_prefills;
  chunked.long_prefill_token_threshold = param.long_prefill_token_threshold;
  chunked.max_long_partial_prefills = param.max_long_partial_prefills;
  const SimResult crowded = RunEngine(chunked, requests, eos);
  EXPECT_TRUE(crowded.ignored.empty());
  EXPECT_EQ(crowded.free_gpu_at_end, 24);
  EXPECT_EQ(crowded.free_cpu_at_end, 20);
  EXPECT_EQ(crowded.tables_at_end, 0u);
  if (param.shared_prefix) {
    EXPECT_GT(crowded.prefix_cache_hits, 0);
  }
  LOG(INFO) << "budget " << param.budget << ": " << crowded.recompute_preemptions << " recompute, "
            << crowded.swap_preemptions << " swap preemptions";

  const SchedulerConfig whole = Config(/*gpu_blocks=*/64, /*cpu_blocks=*/0, param.mode);
  for (SimRequest request : requests) {
    request.arrival_step = 0;
    const SimResult solo = RunEngine(whole, {request}, eos);
    EXPECT_EQ(crowded.outputs.at(request.id), solo.outputs.at(request.id)) << request.id;
    EXPECT_EQ(crowded.statuses.at(request.id), solo.statuses.at(request.id)) << request.id;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Budgets, ChunkedPrefillSimTest,
    ::testing::Values(ChunkCase{1, PreemptionMode::kAuto, true, true},
                      ChunkCase{7, PreemptionMode::kAuto, true, false},
                      ChunkCase{7, PreemptionMode::kRecompute, true, true},
                      ChunkCase{16, PreemptionMode::kSwap, true, false},
                      ChunkCase{16, PreemptionMode::kRecompute, false, true},
                      ChunkCase{61, PreemptionMode::kSwap, false, true},
                      ChunkCase{61, PreemptionMode::kAuto, true, true, 3, 5},
                      ChunkCase{61, PreemptionMode::kAuto, false, true, 3, 5, 2},
                      ChunkCase{16, PreemptionMode::kRecompute, true, false, 2, 4, 2},
                      ChunkCase{2048, PreemptionMode::kAuto, true, true},
                      ChunkCase{2048, PreemptionMode::kRecompute, true, false, 4, 0}));

}  // namespace
}  // namespace pagoda::scheduler
