// Beam search under structured-output constraints, through the engine loop
// and a real CPU ModelRunner in this process: every returned beam's text is
// a sentence of its constraint (checked by std::regex and nlohmann::json, not
// by the matcher), width 1 equals greedy decoding under the same constraint
// where EOS never competes with text, and preemption (recompute and swap)
// and a worker restart change no beam. The token masks follow each plan
// (computed while the forward pass runs): the tokens are those of the same
// masks inside the plan, and a worker lost between a plan and its masks
// changes none. Under speculation, whose drafts the masks follow position
// by position (prompt lookup's, and a draft model's or EAGLE head's
// proposed a step ahead), greedy and seeded requests keep plain decoding's
// tokens. Under overlapped scheduling constrained rows are planned with
// placeholders and their masks follow once the token before is in: the
// tokens of steps one at a time.

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "scheduler/api/constraint_compiler.h"
#include "scheduler/engine/engine.h"
#include "tests/fakes/collecting_sink.h"
#include "tests/fakes/restartable_worker_group.h"
#include "tests/support/tiny_model.h"

namespace pagoda::scheduler {
namespace {

namespace wv1 = ::pagoda::worker::v1;
using testing::CollectingSink;

constexpr int kVocab = 128;
constexpr int32_t kEos = 2;
constexpr int kBlockSize = 4;

// The bytes of each token: ids 0..2 special (2 is EOS), then every single
// character below, then two-character pieces over a smaller alphabet, until
// the vocabulary is full. Written here, independently of the tokenizer, so
// the texts are checked against this table, not the constraint code's.
std::vector<std::optional<std::string>> TokenBytes() {
  std::vector<std::optional<std::string>> bytes(3, std::nullopt);
  const std::string singles = "0123456789abcdefghijklmnopqrstuvwxyz{}[]\":,- ";
  for (char c : singles) bytes.push_back(std::string(1, c));
  const std::string pairs = "aceyomb19\"{}:-";
  for (char first : pairs) {
    for (char second : pairs) {
      if (static_cast<int>(bytes.size()) == kVocab) return bytes;
      bytes.push_back(std::string{first, second});
    }
  }
  return bytes;
}

// One constraint of the suite, with its own check of a whole text.
struct Case {
  std::string name;
  std::function<void(pagoda::v1::GenerateRequest&)> set;
  std::function<bool(const std::string&)> matches;
};

bool RegexMatches(const std::string& pattern, const std::string& text) {
  return std::regex_match(text, std::regex(pattern));
}

// Regexes (EOS competes with text in the first, never in the second), a
// choice (three texts, but more tokenizations than a width of 4) and a JSON
// Schema without blanks.
std::vector<Case> Cases() {
  const std::string letters = "[a-c]{2,6}-[0-9]{1,3}";
  const std::string fixed = "(yes|no|maybe)-[0-9]{2}";
  const std::string schema =
      R"({"type": "object", "properties": {"a": {"type": "integer", "minimum": 0,)"
      R"( "maximum": 99}, "b": {"enum": ["x", "yz"]}}, "required": ["a", "b"],)"
      R"( "additionalProperties": false})";
  return {
      {"letters", [=](auto& r) { r.set_regex(letters); },
       [=](const std::string& t) { return RegexMatches(letters, t); }},
      {"fixed", [=](auto& r) { r.set_regex(fixed); },
       [=](const std::string& t) { return RegexMatches(fixed, t); }},
      {"choice",
       [](auto& r) {
         for (const char* c : {"alpha", "beta", "gamma"}) r.mutable_choice()->add_choices(c);
       },
       [](const std::string& t) { return t == "alpha" || t == "beta" || t == "gamma"; }},
      {"schema",
       [=](auto& r) {
         r.set_json_schema(schema);
         r.set_disable_any_whitespace(true);
       },
       [](const std::string& t) {
         const nlohmann::json value = nlohmann::json::parse(t, nullptr, false);
         return t.find(' ') == std::string::npos && value.is_object() && value.size() == 2 &&
                value["a"].is_number_integer() && value["a"] >= 0 && value["a"] <= 99 &&
                (value["b"] == "x" || value["b"] == "yz");
       }},
  };
}

// Cases() and a loose regex that most tokens satisfy, so that a draft
// proposed without the grammar's mask (a draft model's or an EAGLE head's:
// they draw over the whole vocabulary) is often one the grammar accepts.
std::vector<Case> SpeculableCases() {
  std::vector<Case> cases = Cases();
  const std::string loose = "[a-z0-9 ]{8,40}";
  cases.push_back({"loose", [=](auto& r) { r.set_regex(loose); },
                   [=](const std::string& t) { return RegexMatches(loose, t); }});
  return cases;
}

std::string Text(const std::vector<GeneratedToken>& tokens) {
  static const std::vector<std::optional<std::string>> bytes = TokenBytes();
  std::string text;
  for (const GeneratedToken& token : tokens) {
    if (token.token_id != kEos) text += bytes[token.token_id].value_or("<special>");
  }
  return text;
}

// `text` one character a token (the single-character ids of TokenBytes).
std::vector<int32_t> SingleCharacterTokens(const std::string& text) {
  static const std::vector<std::optional<std::string>> bytes = TokenBytes();
  std::vector<int32_t> ids;
  for (char c : text) {
    const auto it = std::find(bytes.begin(), bytes.end(), std::string(1, c));
    ids.push_back(static_cast<int32_t>(it - bytes.begin()));
  }
  return ids;
}

std::vector<int32_t> Ids(const std::vector<GeneratedToken>& tokens) {
  std::vector<int32_t> ids;
  for (const GeneratedToken& token : tokens) ids.push_back(token.token_id);
  return ids;
}

// What one request returned: each sequence's token ids, by index.
using Outputs = std::map<int, std::vector<int32_t>>;

// Passes every step on to `inner`, counting the constrained rows (a mask
// follows the plan), those of them planned with a placeholder (overlapped)
// and the masks that came empty (a sequence that ended after the plan).
// With `inline_masks`, the masks inside the plan, as the worker took them
// before they followed it: each promised mask merged into its row's
// sampling.token_mask before the plan goes out to the same workers (every
// row's options whole then: the workers keep the merged ones, which a row
// that repeats the server's, sampling_unchanged, no longer is).
class MaskCountingGroup : public WorkerGroup {
 public:
  MaskCountingGroup(WorkerGroup* inner, bool inline_masks)
      : inner_(inner), inline_masks_(inline_masks) {}
  absl::StatusOr<wv1::LoadModelResponse> LoadModel(const wv1::LoadModelRequest& request) override {
    return inner_->LoadModel(request);
  }
  absl::Status InitCache(const wv1::InitCacheRequest& request) override {
    return inner_->InitCache(request);
  }
  absl::StatusOr<wv1::StepResult> ExecuteStep(const wv1::StepPlan& sent,
                                              const StepMaskSource& masks) override {
    wv1::StepPlan whole;
    if (inline_masks_) {
      absl::Status resolved = WithWholeOptions(sent, &whole);
      if (!resolved.ok()) return resolved;
    }
    const wv1::StepPlan& plan = inline_masks_ ? whole : sent;
    if (!PromisesTokenMasks(plan)) return inner_->ExecuteStep(plan, masks);
    for (const wv1::SequenceStep& step : plan.sequences()) {
      rows_ += step.token_mask_follows();
      placeholder_rows_ += step.token_mask_follows() && step.input_from_last_sample();
    }
    const auto counted = [&] {
      wv1::StepMasks built = masks();
      for (const wv1::RowTokenMask& row : built.rows()) empty_masks_ += row.token_mask().empty();
      mask_rows_ += built.rows_size();
      return built;
    };
    if (!inline_masks_) return inner_->ExecuteStep(plan, counted);
    wv1::StepPlan merged = plan;
    const wv1::StepMasks computed = counted();
    int next = 0;
    for (wv1::SequenceStep& step : *merged.mutable_sequences()) {
      if (!step.token_mask_follows()) continue;
      step.set_token_mask_follows(false);
      step.mutable_sampling()->set_token_mask(computed.rows(next++).token_mask());
    }
    return inner_->ExecuteStep(merged, nullptr);
  }
  bool Healthy() const override { return inner_->Healthy(); }
  int world_size() const override { return 1; }
  absl::Status Recover() override { return inner_->Recover(); }
  void Shutdown() override { inner_->Shutdown(); }
  int rows() const { return rows_.load(); }
  int placeholder_rows() const { return placeholder_rows_.load(); }
  int empty_masks() const { return empty_masks_.load(); }
  int mask_rows() const { return mask_rows_.load(); }

 private:
  // `plan` with every row's options whole, by the rule of
  // SequenceStep.sampling_unchanged and sampling_delta against the last plan's.
  absl::Status WithWholeOptions(const wv1::StepPlan& plan, wv1::StepPlan* whole) {
    *whole = plan;
    std::map<int64_t, wv1::SamplingOptions> options;
    for (wv1::SequenceStep& step : *whole->mutable_sequences()) {
      if (step.sampling_unchanged()) {
        auto kept = last_options_.find(step.seq_id());
        if (kept == last_options_.end() || last_step_ != plan.step_id() - 1) {
          return absl::InvalidArgumentError("sampling_unchanged without options to repeat");
        }
        *step.mutable_sampling() = kept->second;
        step.set_sampling_unchanged(false);
      } else if (step.has_sampling_delta()) {  // A penalty row: counts and bans.
        auto kept = last_options_.find(step.seq_id());
        if (kept == last_options_.end() || last_step_ != plan.step_id() - 1) {
          return absl::InvalidArgumentError("sampling_delta without options to grow");
        }
        wv1::SamplingOptions& grown = *step.mutable_sampling() = kept->second;
        *grown.mutable_banned_token_ids() = step.sampling_delta().banned_token_ids();
        for (int32_t token : step.sampling_delta().appended_output_token_ids()) {
          auto& ids = *grown.mutable_output_token_ids();
          const auto found = std::find(ids.begin(), ids.end(), token);
          if (found == ids.end()) {
            grown.add_output_token_ids(token);
            grown.add_output_token_counts(1);
          } else {
            const int at = static_cast<int>(found - ids.begin());
            grown.set_output_token_counts(at, grown.output_token_counts(at) + 1);
          }
        }
        step.clear_sampling_delta();
      }
      options[step.seq_id()] = step.sampling();
    }
    last_options_ = std::move(options);
    last_step_ = plan.step_id();
    return absl::OkStatus();
  }

  std::map<int64_t, wv1::SamplingOptions> last_options_;  // Of plan last_step_.
  int64_t last_step_ = -2;
  WorkerGroup* inner_;
  const bool inline_masks_;
  std::atomic<int> rows_{0};
  std::atomic<int> placeholder_rows_{0};
  std::atomic<int> empty_masks_{0};
  std::atomic<int> mask_rows_{0};
};

class ConstrainedBeamTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_dir_ = new std::string(pagoda::testing::TempPath("pagoda_constrained_beam"));
    ASSERT_TRUE(pagoda::testing::WriteTinyModel(
                    *model_dir_,
                    "--vocab-size 128 --hidden-size 64 --intermediate-size 96 --num-layers 2"
                    " --num-heads 4 --num-kv-heads 2 --dtype f32 --seed 5 --eos-id 2")
                    .ok());
    compiler_ = new ConstraintCompiler(*constraints::TokenVocabulary::Create(TokenBytes(), kVocab));
    // An EAGLE head that is nearly the target itself, so that its drafts
    // are often right (eagle_reference.py make --clone).
    eagle_dir_ = new std::string(*model_dir_ + "_eagle");
    const std::string make_head =
        absl::StrCat(pagoda::testing::PythonBinary(), " tests/reference/eagle_reference.py make",
                     " --clone --source ", *model_dir_, " --out ", *eagle_dir_);
    ASSERT_EQ(std::system(make_head.c_str()), 0) << make_head;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*model_dir_);
    std::filesystem::remove_all(*eagle_dir_);
    delete model_dir_;
    delete eagle_dir_;
    delete compiler_;
  }

  // With `run_now` false the engine's thread starts at the next RunSuite,
  // once every request of the suite is queued: the first step then sees them
  // all, so how many are preempted or running at a crash does not depend on
  // how fast this thread submits (a loaded machine once saw no preemption).
  void StartEngine(int gpu_blocks = 256, PreemptionMode mode = PreemptionMode::kAuto,
                   int cpu_blocks = 0, bool run_now = true, bool inline_masks = false,
                   std::optional<SpeculativeConfig> speculative = std::nullopt,
                   bool async_scheduling = true) {
    engine_.reset();
    workers_ = std::make_unique<RestartableWorkerGroup>();
    wv1::LoadModelRequest load;
    load.set_model_dir(*model_dir_);
    load.set_world_size(1);
    load.set_block_size(kBlockSize);
    load.set_device("cpu");
    load.set_kv_cache_memory_bytes(64 << 20);
    load.set_max_num_batched_tokens(256);
    load.set_max_num_seqs(64);
    if (speculative.has_value() && speculative->method != SpeculativeMethod::kNgram) {
      load.set_draft_model_dir(speculative->model);
      load.set_draft_is_eagle_head(speculative->method == SpeculativeMethod::kEagle);
    }
    ASSERT_TRUE(workers_->LoadModel(load).ok());
    wv1::InitCacheRequest init;
    init.set_num_gpu_blocks(gpu_blocks);
    init.set_num_cpu_blocks(cpu_blocks);
    ASSERT_TRUE(workers_->InitCache(init).ok());
    EngineConfig config;
    config.scheduler.block_size = kBlockSize;
    config.scheduler.num_gpu_blocks = gpu_blocks;
    config.scheduler.num_cpu_blocks = cpu_blocks;
    config.scheduler.preemption_mode = mode;
    config.scheduler.max_num_seqs = 64;
    config.scheduler.max_num_batched_tokens = 256;
    config.scheduler.max_model_len = 256;
    config.eos_token_ids = {kEos};
    config.vocab_size = kVocab;
    config.speculative = speculative;
    // Masks inside the plan are built before the plan's placeholders are
    // known (the worker refuses the two together): one step at a time.
    config.async_scheduling = async_scheduling && !inline_masks;
    counter_ = std::make_unique<MaskCountingGroup>(workers_.get(), inline_masks);
    engine_ = std::make_unique<Engine>(config, counter_.get(), nullptr);
    engine_running_ = run_now;
    if (run_now) engine_->Start();
  }

  // A request under `c`: beam search of `width` returning every beam, or
  // greedy decoding when width is 0 (seeded sampling at `temperature` > 0).
  std::shared_ptr<CollectingSink> Submit(const std::string& id, const Case& c, int width,
                                         std::vector<int32_t> prompt = {5, 17, 40, 9, 33},
                                         float temperature = 0.0f, uint64_t seed = 1,
                                         std::vector<std::vector<int32_t>> bad_words = {}) {
    pagoda::v1::GenerateRequest request;
    c.set(request);
    absl::StatusOr<std::shared_ptr<const constraints::CompiledGrammar>> grammar =
        compiler_->Compile(request);
    EXPECT_TRUE(grammar.ok()) << grammar.status();
    auto sink = std::make_shared<CollectingSink>();
    EngineRequest engine_request;
    engine_request.request_id = id;
    engine_request.prompt_token_ids = std::move(prompt);
    engine_request.sampling.seed = seed;
    engine_request.sampling.temperature = temperature;
    engine_request.sampling.grammar = grammar.ok() ? *grammar : nullptr;
    engine_request.sampling.bad_words_token_ids = std::move(bad_words);
    engine_request.sampling.use_beam_search = width > 0;
    engine_request.sampling.n = engine_request.sampling.best_of = std::max(width, 1);
    engine_request.stopping.max_tokens = 48;
    engine_request.sink = sink;
    EXPECT_TRUE(engine_->AddRequest(std::move(engine_request)).ok());
    return sink;
  }

  // Waits for `sink` and checks every sequence: ended at EOS, a sentence of
  // `c`; returns the token ids by index.
  static Outputs Finish(CollectingSink& sink, const Case& c, const std::string& label) {
    EXPECT_TRUE(sink.WaitFinished(absl::Seconds(120))) << label;
    EXPECT_TRUE(sink.status().ok()) << label << ": " << sink.status();
    Outputs outputs;
    for (const auto& [index, output] : sink.sequences()) {
      const std::string text = Text(output.tokens);
      EXPECT_EQ(output.status, SequenceStatus::kFinishedStopped) << label << " " << index;
      EXPECT_TRUE(c.matches(text)) << label << " " << index << ": '" << text << "'";
      EXPECT_TRUE(!output.tokens.empty() && output.tokens.back().token_id == kEos)
          << label << " " << index;
      outputs[index] = Ids(output.tokens);
    }
    return outputs;
  }

  // Every case at widths 2 and 4, all at once; the outputs by request id.
  std::map<std::string, Outputs> RunSuite() {
    std::vector<std::pair<std::string, std::shared_ptr<CollectingSink>>> sinks;
    for (const Case& c : Cases()) {
      for (int width : {2, 4}) {
        const std::string id = absl::StrCat(c.name, "/", width);
        sinks.emplace_back(id, Submit(id, c, width, {5, 17, 40, 9, 33, width}));
      }
    }
    if (!engine_running_) {
      engine_->Start();
      engine_running_ = true;
    }
    std::map<std::string, Outputs> outputs;
    for (const auto& [id, sink] : sinks) {
      const std::string name = id.substr(0, id.find('/'));
      for (const Case& c : Cases()) {
        if (c.name == name) outputs[id] = Finish(*sink, c, id);
      }
    }
    return outputs;
  }

  // Every case greedy, sampled under three seeds and as a beam of 2, all
  // in one batch; the outputs by request id.
  std::map<std::string, Outputs> RunMixedBatch() {
    std::vector<std::pair<std::string, std::shared_ptr<CollectingSink>>> sinks;
    for (const Case& c : Cases()) {
      sinks.emplace_back(c.name + "/greedy", Submit(c.name + "/greedy", c, 0));
      for (uint64_t seed : {1, 2, 3}) {
        const std::string id = absl::StrCat(c.name, "/seed", seed);
        sinks.emplace_back(id, Submit(id, c, 0, {5, 17, 40, 9, 33}, 0.9f, seed));
      }
      sinks.emplace_back(c.name + "/beam", Submit(c.name + "/beam", c, 2));
    }
    if (!engine_running_) {
      engine_->Start();
      engine_running_ = true;
    }
    std::map<std::string, Outputs> outputs;
    for (const auto& [id, sink] : sinks) {
      for (const Case& c : Cases()) {
        if (id.substr(0, id.find('/')) == c.name) outputs[id] = Finish(*sink, c, id);
      }
    }
    return outputs;
  }

  // Every case greedy and sampled at temperature 1 under three seeds (no
  // beam: speculation refuses it), all in one batch, from a prompt that
  // holds text the grammars allow, so prompt lookup proposes drafts; the
  // outputs by request id. A seeded row draws each position as plain
  // decoding does (worker/draft_verification.h), so equal tokens is the
  // distribution's check, draw by draw.
  std::map<std::string, Outputs> RunSpeculableBatch() {
    const std::vector<int32_t> prompt =
        SingleCharacterTokens(R"(alpha beta yes-12 {"a":1,"b":"x"} abc-12)");
    std::vector<std::pair<std::string, std::shared_ptr<CollectingSink>>> sinks;
    for (const Case& c : SpeculableCases()) {
      sinks.emplace_back(c.name + "/greedy", Submit(c.name + "/greedy", c, 0, prompt));
      for (uint64_t seed : {1, 2, 3}) {
        const std::string id = absl::StrCat(c.name, "/seed", seed);
        sinks.emplace_back(id, Submit(id, c, 0, prompt, 1.0f, seed));
      }
    }
    if (!engine_running_) {
      engine_->Start();
      engine_running_ = true;
    }
    std::map<std::string, Outputs> outputs;
    for (const auto& [id, sink] : sinks) {
      for (const Case& c : SpeculableCases()) {
        if (id.substr(0, id.find('/')) == c.name) outputs[id] = Finish(*sink, c, id);
      }
    }
    return outputs;
  }

  static std::string* model_dir_;
  static std::string* eagle_dir_;
  static ConstraintCompiler* compiler_;
  std::unique_ptr<RestartableWorkerGroup> workers_;
  std::unique_ptr<MaskCountingGroup> counter_;
  std::unique_ptr<Engine> engine_;
  bool engine_running_ = false;
};

std::string* ConstrainedBeamTest::model_dir_ = nullptr;
std::string* ConstrainedBeamTest::eagle_dir_ = nullptr;
ConstraintCompiler* ConstrainedBeamTest::compiler_ = nullptr;

TEST_F(ConstrainedBeamTest, EveryBeamOfWidthTwoAndFourIsASentenceOfItsConstraint) {
  StartEngine();
  for (const Case& c : Cases()) {
    for (int width : {2, 4}) {
      const std::string label = absl::StrCat(c.name, " width ", width);
      std::shared_ptr<CollectingSink> sink = Submit(label, c, width);
      const Outputs outputs = Finish(*sink, c, label);
      // As many beams as asked (a text may come back under two
      // tokenizations: beams are token sequences), all different.
      EXPECT_EQ(static_cast<int>(outputs.size()), width) << label;
      std::vector<std::vector<int32_t>> distinct;
      for (const auto& [index, ids] : outputs) distinct.push_back(ids);
      std::sort(distinct.begin(), distinct.end());
      EXPECT_EQ(std::unique(distinct.begin(), distinct.end()), distinct.end()) << label;
    }
  }
  ASSERT_TRUE(engine_->WaitUntilIdle(absl::Seconds(5)));
  EXPECT_EQ(engine_->snapshot().free_gpu_blocks, 256);  // Pruned beams freed theirs.
}

TEST_F(ConstrainedBeamTest, LogprobsRenormaliseOverTheTokensTheGrammarAllows) {
  StartEngine();
  // After "yes-12" the regex allows only EOS: its logprob over the allowed
  // tokens is log 1, where the raw one would be below 0.
  const Case fixed = Cases()[1];
  std::shared_ptr<CollectingSink> sink = Submit("fixed", fixed, 2);
  Finish(*sink, fixed, "fixed");
  for (const auto& [index, output] : sink->sequences()) {
    EXPECT_EQ(output.tokens.back().logprob, 0.0f) << index;
    for (const GeneratedToken& token : output.tokens) {
      EXPECT_LE(token.logprob, 0.0f);
      EXPECT_GT(token.logprob, -1e30f);  // Never a masked token.
    }
  }
}

TEST_F(ConstrainedBeamTest, WidthOneIsGreedyWhereEosNeverCompetesWithText) {
  // In these grammars EOS is allowed only once the text is complete, and
  // then alone: one beam takes the argmax of the allowed tokens each step
  // and no other hypothesis ever finishes, exactly as greedy decoding.
  StartEngine();
  for (const Case& c : Cases()) {
    if (c.name == "letters") continue;  // EOS competes with digits there.
    std::shared_ptr<CollectingSink> greedy = Submit(c.name + " greedy", c, 0);
    std::shared_ptr<CollectingSink> beam = Submit(c.name + " beam", c, 1);
    const Outputs greedy_outputs = Finish(*greedy, c, c.name + " greedy");
    const Outputs beam_outputs = Finish(*beam, c, c.name + " beam");
    EXPECT_EQ(beam_outputs, greedy_outputs) << c.name;
  }
}

TEST_F(ConstrainedBeamTest, PreemptionByRecomputeOrSwapChangesNoBeam) {
  StartEngine();
  const std::map<std::string, Outputs> expected = RunSuite();
  ASSERT_EQ(expected.size(), 8u);
  // 40 blocks of 4 tokens for 8 groups of up to 4 beams of about 20 tokens.
  for (PreemptionMode mode : {PreemptionMode::kRecompute, PreemptionMode::kSwap}) {
    const bool swap = mode == PreemptionMode::kSwap;
    engine_.reset();
    StartEngine(40, mode, swap ? 512 : 0, /*run_now=*/false);
    EXPECT_EQ(RunSuite(), expected) << (swap ? "swap" : "recompute");
    EXPECT_GT(engine_->snapshot().num_preemptions_total, 0) << (swap ? "swap" : "recompute");
    EXPECT_EQ(workers_->swap_out_moves() > 0, swap);
  }
}

TEST_F(ConstrainedBeamTest, AWorkerRestartChangesNoBeam) {
  StartEngine();
  const std::map<std::string, Outputs> expected = RunSuite();
  engine_.reset();
  StartEngine(256, PreemptionMode::kAuto, 0, /*run_now=*/false);
  // Every request is in by then, its beams forked and some pruned: all
  // resume by recomputation (the suite takes about 18 steps).
  workers_->CrashBeforeStep(5);
  EXPECT_EQ(RunSuite(), expected);
  EXPECT_EQ(workers_->restarts(), 1);
}

TEST_F(ConstrainedBeamTest, MasksThatFollowThePlanGiveTheTokensOfMasksInsideIt) {
  StartEngine(256, PreemptionMode::kAuto, 0, /*run_now=*/true, /*inline_masks=*/true);
  const std::map<std::string, Outputs> expected = RunMixedBatch();
  ASSERT_EQ(expected.size(), 20u);
  // No mask followed a plan, so the worker never waited for one.
  EXPECT_EQ(engine_->snapshot().seconds_total.mask_wait, 0);
  StartEngine();
  EXPECT_EQ(RunMixedBatch(), expected);
  // Every constrained step waited, however briefly, and the wait is part of
  // the forward time the worker reports.
  const StepSeconds seconds = engine_->snapshot().seconds_total;
  EXPECT_GT(seconds.mask_wait, 0);
  EXPECT_LT(seconds.mask_wait, seconds.forward);
}

TEST_F(ConstrainedBeamTest, AWorkerLostBetweenPlanAndMasksChangesNoToken) {
  StartEngine();
  const std::map<std::string, Outputs> expected = RunMixedBatch();
  StartEngine();
  // The fifth step's forward pass ran; its masks never reach the worker.
  workers_->CrashBeforeMasks(5);
  EXPECT_EQ(RunMixedBatch(), expected);
  EXPECT_EQ(workers_->restarts(), 1);
}

// Structured outputs under overlapped scheduling (docs/architecture.md,
// "Overlapped scheduling", 7.): a constrained row is planned every step with
// a placeholder, and its mask, built once the token before it is in,
// follows the plan. Every case greedy, seeded and as a beam, beside
// unconstrained requests that keep every step busy, gets the tokens of
// steps one at a time, and the constrained rows did overlap (before, they
// sat out every step planned while their token was in flight).
TEST_F(ConstrainedBeamTest, ConstrainedRowsOverlapAndKeepTheTokensOfStepsOneAtATime) {
  struct Run {
    std::map<std::string, Outputs> constrained;
    std::vector<std::vector<GeneratedToken>> plain;
    EngineSnapshot snapshot;
    int rows = 0;
    int placeholder_rows = 0;
    int empty_masks = 0;
  };
  auto run = [&](bool async_scheduling, Run* result) {
    StartEngine(256, PreemptionMode::kAuto, 0, /*run_now=*/false, /*inline_masks=*/false,
                std::nullopt, async_scheduling);
    std::vector<std::shared_ptr<CollectingSink>> plain;
    for (int i = 0; i < 4; ++i) {
      auto sink = std::make_shared<CollectingSink>();
      EngineRequest request;
      request.request_id = absl::StrCat("plain", i);
      request.prompt_token_ids = {7, 11, 13, static_cast<int32_t>(20 + i)};
      request.sampling.seed = 50 + i;
      request.sampling.temperature = i % 2 == 0 ? 0.0f : 0.8f;
      request.stopping.max_tokens = 60;
      request.stopping.ignore_eos = true;
      request.sink = sink;
      ASSERT_TRUE(engine_->AddRequest(std::move(request)).ok());
      plain.push_back(sink);
    }
    result->constrained = RunMixedBatch();
    for (const auto& sink : plain) {
      ASSERT_TRUE(sink->WaitFinished(absl::Seconds(120)));
      result->plain.push_back(sink->sequences().at(0).tokens);
    }
    ASSERT_TRUE(engine_->WaitUntilIdle(absl::Seconds(5)));
    result->snapshot = engine_->snapshot();
    result->rows = counter_->rows();
    result->placeholder_rows = counter_->placeholder_rows();
    result->empty_masks = counter_->empty_masks();
    EXPECT_EQ(result->snapshot.free_gpu_blocks, 256);
  };
  Run one_at_a_time;
  ASSERT_NO_FATAL_FAILURE(run(false, &one_at_a_time));
  Run overlapped;
  ASSERT_NO_FATAL_FAILURE(run(true, &overlapped));
  EXPECT_EQ(overlapped.constrained, one_at_a_time.constrained);
  ASSERT_EQ(overlapped.plain.size(), one_at_a_time.plain.size());
  for (size_t i = 0; i < one_at_a_time.plain.size(); ++i) {
    EXPECT_EQ(Ids(overlapped.plain[i]), Ids(one_at_a_time.plain[i])) << "plain " << i;
  }
  EXPECT_EQ(one_at_a_time.snapshot.num_overlapped_steps, 0);
  EXPECT_EQ(one_at_a_time.placeholder_rows, 0);
  // Every constrained row but a sequence's first (and the beams', which
  // sit out a step) refers to the token in flight: the greedy and seeded
  // rows are most of them. Before, none did: such a row sat out the step.
  EXPECT_GT(overlapped.placeholder_rows, overlapped.rows / 2)
      << overlapped.placeholder_rows << " of " << overlapped.rows;
  EXPECT_GT(overlapped.snapshot.num_overlapped_steps, overlapped.snapshot.num_steps / 2);
  // Late stops: a request that drew EOS was already in the next plan, and
  // the worker still got a (free) mask for its row, whose token was dropped.
  EXPECT_EQ(one_at_a_time.empty_masks, 0);
  EXPECT_GT(overlapped.empty_masks, 0);
}

// Under overlap the masks of the step queued behind step N are built as
// soon as N's tokens are appended, before they are streamed: a lone greedy
// constrained request, whose sink holds the engine thread on each token
// until the worker has taken the mask of the next one (the waits would time
// out if the masks came only after the streaming, as they did before).
TEST_F(ConstrainedBeamTest, NextStepMasksAreBuiltBeforeAStepsTokensAreStreamed) {
  StartEngine();
  const Case letters = Cases()[0];
  pagoda::v1::GenerateRequest constraint;
  letters.set(constraint);
  absl::StatusOr<std::shared_ptr<const constraints::CompiledGrammar>> grammar =
      compiler_->Compile(constraint);
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  auto sink = std::make_shared<CollectingSink>();
  int waited = 0;
  int ahead = 0;
  sink->set_on_delta([&](int num_tokens) {
    if (IsFinished(sink->last_status())) return;
    ++waited;
    // One mask row a token: those of the tokens so far and the next one's.
    const absl::Time deadline = absl::Now() + absl::Seconds(ahead == waited - 1 ? 10 : 0);
    while (counter_->mask_rows() < num_tokens + 1 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    ahead += counter_->mask_rows() >= num_tokens + 1;
  });
  EngineRequest request;
  request.request_id = "letters/held";
  request.prompt_token_ids = {5, 17, 40, 9, 33};
  request.sampling.grammar = *grammar;
  request.stopping.max_tokens = 48;
  request.sink = sink;
  ASSERT_TRUE(engine_->AddRequest(std::move(request)).ok());
  Finish(*sink, letters, "letters/held");
  EXPECT_GT(waited, 2);
  EXPECT_EQ(ahead, waited);
}

// Whether `word` occurs in `ids`, its tokens in a row.
bool HoldsWord(const std::vector<int32_t>& ids, const std::vector<int32_t>& word) {
  return std::search(ids.begin(), ids.end(), word.begin(), word.end()) != ids.end();
}

// Multi-token bad words under overlapped scheduling (docs/architecture.md,
// "Overlapped scheduling", 7.): their ban reads the token in flight, so it
// follows the plan in a mask built once that token is in, alone or folded
// into a grammar's. Greedy and seeded requests whose bad words are runs of
// their own unbanned output (so the ban changes it), and constrained ones
// with bad words, get the tokens of steps one at a time, never hold a
// banned word, and were planned every step with a placeholder (before,
// they sat out every step planned while their token was in flight).
TEST_F(ConstrainedBeamTest, MultiTokenBadWordsOverlapAndKeepTheTokensOfStepsOneAtATime) {
  constexpr int kPlain = 4;
  const Case letters = Cases()[0];
  const std::vector<std::vector<int32_t>> grammar_bad_words = {SingleCharacterTokens("ab"),
                                                               SingleCharacterTokens("-1")};
  struct Run {
    std::vector<std::vector<int32_t>> plain;
    std::map<std::string, Outputs> constrained;
    EngineSnapshot snapshot;
    int rows = 0;
    int placeholder_rows = 0;
  };
  // Plain request i under bad_words[i] (none when empty), two constrained
  // ones (greedy, seeded) under grammar_bad_words.
  auto run = [&](bool async_scheduling,
                 const std::vector<std::vector<std::vector<int32_t>>>& bad_words, Run* result) {
    StartEngine(256, PreemptionMode::kAuto, 0, /*run_now=*/true, /*inline_masks=*/false,
                std::nullopt, async_scheduling);
    std::vector<std::shared_ptr<CollectingSink>> plain;
    for (int i = 0; i < kPlain; ++i) {
      auto sink = std::make_shared<CollectingSink>();
      EngineRequest request;
      request.request_id = absl::StrCat("plain", i);
      request.prompt_token_ids = {7, 11, 13, static_cast<int32_t>(20 + i)};
      request.sampling.seed = 50 + i;
      request.sampling.temperature = i % 2 == 0 ? 0.0f : 0.8f;
      if (!bad_words.empty()) request.sampling.bad_words_token_ids = bad_words[i];
      request.stopping.max_tokens = 32;
      request.stopping.ignore_eos = true;
      request.sink = sink;
      ASSERT_TRUE(engine_->AddRequest(std::move(request)).ok());
      plain.push_back(sink);
    }
    std::vector<std::pair<std::string, std::shared_ptr<CollectingSink>>> constrained;
    for (float temperature : {0.0f, 0.9f}) {
      const std::string id = absl::StrCat("letters/t", temperature);
      constrained.emplace_back(
          id, Submit(id, letters, 0, {5, 17, 40, 9, 33}, temperature, 3, grammar_bad_words));
    }
    for (const auto& sink : plain) {
      ASSERT_TRUE(sink->WaitFinished(absl::Seconds(120)));
      result->plain.push_back(Ids(sink->sequences().at(0).tokens));
    }
    for (const auto& [id, sink] : constrained) {
      result->constrained[id] = Finish(*sink, letters, id);
    }
    ASSERT_TRUE(engine_->WaitUntilIdle(absl::Seconds(5)));
    result->snapshot = engine_->snapshot();
    result->rows = counter_->rows();
    result->placeholder_rows = counter_->placeholder_rows();
  };
  Run unbanned;
  ASSERT_NO_FATAL_FAILURE(run(false, {}, &unbanned));
  // Each plain request bans a pair and a triple of its own output.
  std::vector<std::vector<std::vector<int32_t>>> bad_words;
  for (const std::vector<int32_t>& ids : unbanned.plain) {
    ASSERT_GE(ids.size(), 12u);
    bad_words.push_back({{ids[3], ids[4]}, {ids[8], ids[9], ids[10]}});
  }
  Run one_at_a_time;
  ASSERT_NO_FATAL_FAILURE(run(false, bad_words, &one_at_a_time));
  Run overlapped;
  ASSERT_NO_FATAL_FAILURE(run(true, bad_words, &overlapped));
  EXPECT_EQ(overlapped.constrained, one_at_a_time.constrained);
  for (int i = 0; i < kPlain; ++i) {
    EXPECT_EQ(overlapped.plain[i], one_at_a_time.plain[i]) << "plain " << i;
    EXPECT_NE(one_at_a_time.plain[i], unbanned.plain[i]) << "plain " << i;
    for (const std::vector<int32_t>& word : bad_words[i]) {
      EXPECT_FALSE(HoldsWord(overlapped.plain[i], word)) << "plain " << i;
    }
  }
  for (const auto& [id, outputs] : overlapped.constrained) {
    for (const std::vector<int32_t>& word : grammar_bad_words) {
      EXPECT_FALSE(HoldsWord(outputs.at(0), word)) << id;
    }
  }
  // One at a time no ban followed a plan but the grammars' masks; with
  // overlap every row but a sequence's first decodes the token in flight,
  // its ban in the mask that follows.
  EXPECT_EQ(one_at_a_time.placeholder_rows, 0);
  EXPECT_GT(overlapped.rows, one_at_a_time.rows);
  EXPECT_GT(overlapped.placeholder_rows, overlapped.rows / 2)
      << overlapped.placeholder_rows << " of " << overlapped.rows;
  EXPECT_GT(overlapped.snapshot.num_overlapped_steps, overlapped.snapshot.num_steps / 2);
}

// Speculative decoding with structured outputs: the masks follow the drafts
// position by position (constraint_mask.h), so every accepted draft was
// drawn under the mask plain decoding would have used there.
TEST_F(ConstrainedBeamTest, SpeculationKeepsPlainTokensUnderEveryConstraint) {
  StartEngine();
  const std::map<std::string, Outputs> expected = RunSpeculableBatch();
  ASSERT_EQ(expected.size(), 20u);
  SpeculativeConfig ngram;
  ngram.method = SpeculativeMethod::kNgram;
  ngram.num_speculative_tokens = 4;
  ngram.prompt_lookup_min = 1;
  ngram.prompt_lookup_max = 3;
  StartEngine(256, PreemptionMode::kAuto, 0, /*run_now=*/true, /*inline_masks=*/false, ngram);
  EXPECT_EQ(RunSpeculableBatch(), expected);
  // Drafts were proposed and accepted (85 of 176 when written): the masks
  // of accepted positions did decide tokens.
  const SpecDecodeTotals totals = engine_->snapshot().spec_decode;
  EXPECT_GT(totals.num_draft_tokens, 0);
  EXPECT_GT(totals.num_accepted_tokens, 0) << totals.num_draft_tokens << " drafts";

  // A draft model (the target itself) and an EAGLE head propose a step
  // ahead: the server cuts their proposals at the grammar and sends them as
  // drafts with a mask per position. The target as its own draft draws as
  // the target does but without the mask, so its drafts are accepted
  // wherever the grammar allows the token the unmasked draw picks.
  SpeculativeConfig draft;
  draft.method = SpeculativeMethod::kDraftModel;
  draft.model = *model_dir_;
  draft.num_speculative_tokens = 4;
  StartEngine(256, PreemptionMode::kAuto, 0, /*run_now=*/true, /*inline_masks=*/false, draft);
  EXPECT_EQ(RunSpeculableBatch(), expected);
  // Every draft the grammar let through was accepted (35 of 35 when
  // written): the proposals after a step follow its accepted tokens at the
  // right positions, K/V and noise.
  const SpecDecodeTotals drafted = engine_->snapshot().spec_decode;
  EXPECT_GT(drafted.num_draft_tokens, 0);
  EXPECT_EQ(drafted.num_accepted_tokens, drafted.num_draft_tokens);

  SpeculativeConfig eagle = draft;
  eagle.method = SpeculativeMethod::kEagle;
  eagle.model = *eagle_dir_;
  StartEngine(256, PreemptionMode::kAuto, 0, /*run_now=*/true, /*inline_masks=*/false, eagle);
  EXPECT_EQ(RunSpeculableBatch(), expected);
  // A head that is nearly the target: 31 of 40 accepted when written (17
  // of 79 before its draws shared the target's noise).
  const SpecDecodeTotals headed = engine_->snapshot().spec_decode;
  EXPECT_GT(headed.num_draft_tokens, 0);
  EXPECT_GT(headed.num_accepted_tokens, 0) << headed.num_draft_tokens << " drafts";
}

// A draft model's proposals made a step ahead under preemption (recompute,
// then swap, in a cache of 60 blocks for 20 requests of up to 90 tokens)
// and a worker restart mid-run (the proposals in flight are lost): plain
// decoding's tokens.
TEST_F(ConstrainedBeamTest, SpeculationAheadSurvivesPreemptionAndARestart) {
  StartEngine();
  const std::map<std::string, Outputs> expected = RunSpeculableBatch();
  SpeculativeConfig draft;
  draft.method = SpeculativeMethod::kDraftModel;
  draft.model = *model_dir_;
  draft.num_speculative_tokens = 4;
  for (PreemptionMode mode : {PreemptionMode::kRecompute, PreemptionMode::kSwap}) {
    const bool swap = mode == PreemptionMode::kSwap;
    engine_.reset();
    StartEngine(60, mode, swap ? 512 : 0, /*run_now=*/false, /*inline_masks=*/false, draft);
    workers_->CrashBeforeMasks(8);
    EXPECT_EQ(RunSpeculableBatch(), expected) << (swap ? "swap" : "recompute");
    EXPECT_GT(engine_->snapshot().num_preemptions_total, 0) << (swap ? "swap" : "recompute");
    EXPECT_EQ(workers_->swap_out_moves() > 0, swap);
    EXPECT_EQ(workers_->restarts(), 1);
    EXPECT_GT(engine_->snapshot().spec_decode.num_accepted_tokens, 0);
  }
}

}  // namespace
}  // namespace pagoda::scheduler
