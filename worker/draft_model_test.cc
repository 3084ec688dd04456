// The draft_model method through the CPU ModelRunner on tiny random Llamas:
// rows that ask for proposals (SequenceStep.num_draft_proposals) get drafts
// from the worker's draft model, verified in the same step, and every
// sequence's tokens equal plain decoding's (greedy, seeded, and seeded with
// penalties, logit bias, top-k/p and min-p). With the target itself as the
// draft, the acceptance is exactly what the target's own argmaxes predict,
// which holds only if the draft's KV cache follows every verified position
// (rejected drafts included). Refusals: proposals without a draft model,
// out of range, beside the server's drafts; a draft of another vocabulary.
// The eagle method: an EAGLE head's drafts against the float64 reference
// (tests/reference/eagle_reference.py) over the target's own hidden states,
// tokens equal to plain decoding's, and malformed heads refused at load.
// The eagle3 method: the same over an EAGLE-3 head
// (tests/reference/eagle3_reference.py), whose features are three target
// layers' inputs and whose drafts come from a draft vocabulary via d2t.

#include "worker/draft_model.h"

#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/runner_test_model.h"
#include "worker/cpu/cpu_backend.h"
#include "worker/cpu/cpu_model_runner.h"
#include "worker/model_runner.h"

namespace pagoda::worker {
namespace {

using v1::LoadModelRequest;
using v1::SamplingOptions;
using v1::SequenceStep;
using v1::StepPlan;

constexpr int kBlockSize = 4;
constexpr int kBlocksPerSeq = 7;  // 28 tokens: prompt 6, 17 new, 4 drafts past them.
constexpr int kSeqs = 3;
constexpr int kVocab = 50;
constexpr int kNewTokens = 17;
constexpr int kDrafts = 4;
const std::vector<int> kPrompt = {5, 17, 3, 42, 8, 11};

struct Decoded {
  std::vector<int> tokens;
  std::vector<int> top1;               // Per position, the most likely token (raw logits).
  std::vector<int> accepted_per_step;  // Verify steps only.
};

class DraftModelRunnerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    target_ = new std::string(MakeRunnerTestModel("pagoda_draft_target", kVocab, /*seed=*/11));
    other_ = new std::string(MakeRunnerTestModel("pagoda_draft_other", kVocab, /*seed=*/5));
    small_vocab_ = new std::string(MakeRunnerTestModel("pagoda_draft_vocab", kVocab - 2, 5));
    eagle_ = new std::string(MakeEagleHeads("pagoda_eagle_heads"));
    eagle3_ = new std::string(MakeEagle3Heads("pagoda_eagle3_heads"));
    clone_ = new std::string(MakeCloneHead("pagoda_eagle_clone"));
  }
  static void TearDownTestSuite() {
    for (std::string* dir : {target_, other_, small_vocab_, eagle_, eagle3_, clone_}) {
      std::filesystem::remove_all(*dir);
      delete dir;
    }
  }

  // EAGLE heads for the target (eagle_reference.py variants over
  // <dir>/source, a one-layer tiny Llama of the target's hidden size with
  // heads and MLP of its own): <dir>/good/model, and malformed ones.
  static std::string MakeEagleHeads(const std::string& tag) {
    std::string pattern = absl::StrCat("/tmp/", tag, "_XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) return "";
    const std::string command = absl::StrCat(
        Python(), " ", SourceDir(), "/scripts/make_tiny_model.py --out ", pattern,
        "/source --arch llama --vocab-size ", kVocab,
        " --hidden-size 32 --intermediate-size 40 --num-layers 1 --num-heads 2 --num-kv-heads 1"
        " --max-position-embeddings 64 --dtype f32 --seed 3 > /dev/null && ",
        Python(), " ", SourceDir(), "/tests/reference/eagle_reference.py variants --source ",
        pattern, "/source --vocab-source ", *small_vocab_, "/model --out ", pattern);
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    return pattern;
  }
  // EAGLE-3 heads (eagle3_reference.py variants over the EAGLE heads'
  // source): <dir>/good/model, <dir>/own_embed/model and malformed ones.
  static std::string MakeEagle3Heads(const std::string& tag) {
    std::string pattern = absl::StrCat("/tmp/", tag, "_XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) return "";
    const std::string command =
        absl::StrCat(Python(), " ", SourceDir(), "/tests/reference/eagle3_reference.py variants",
                     " --source ", *eagle_, "/source --target-vocab ", kVocab, " --out ", pattern);
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    return pattern;
  }
  // An EAGLE head nearly the target (eagle_reference.py make --clone: the
  // target's layers over its token's embedding): <dir>/model.
  static std::string MakeCloneHead(const std::string& tag) {
    std::string pattern = absl::StrCat("/tmp/", tag, "_XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) return "";
    const std::string command =
        absl::StrCat(Python(), " ", SourceDir(), "/tests/reference/eagle_reference.py make --clone",
                     " --source ", *target_, "/model --out ", pattern, "/model");
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    return pattern;
  }
  static std::string Python() {
    const char* python = std::getenv("PAGODA_PYTHON3");
    return python != nullptr ? python : "/usr/bin/python3";
  }
  static std::string SourceDir() {
    const char* dir = std::getenv("PAGODA_SOURCE_DIR");
    return dir != nullptr ? dir : ".";
  }
  // What eagle_reference.py prints for `args`.
  // With `eagle3_head` set, what eagle3_reference.py prints for that head.
  static std::string Reference(const std::string& args, const std::string& eagle3_head = "") {
    const std::string command =
        eagle3_head.empty()
            ? absl::StrCat(Python(), " ", SourceDir(), "/tests/reference/eagle_reference.py ", args,
                           " --target ", *target_, "/model --head ", *eagle_, "/good/model")
            : absl::StrCat(Python(), " ", SourceDir(), "/tests/reference/eagle3_reference.py ",
                           args, " --target ", *target_, "/model --head ", *eagle3_, "/",
                           eagle3_head, "/model");
    FILE* pipe = popen(command.c_str(), "r");
    std::string out;
    char chunk[256];
    while (pipe != nullptr && fgets(chunk, sizeof(chunk), pipe) != nullptr) out += chunk;
    EXPECT_TRUE(pipe != nullptr && pclose(pipe) == 0) << command;
    return std::string(absl::StripTrailingAsciiWhitespace(out));
  }

  static LoadModelRequest LoadRequest(const std::string& draft_dir, bool eagle = false,
                                      bool eagle3 = false) {
    LoadModelRequest load;
    load.set_model_dir(*target_ + "/model");
    if (!draft_dir.empty()) load.set_draft_model_dir(draft_dir + "/model");
    load.set_draft_is_eagle_head(eagle);
    load.set_draft_is_eagle3_head(eagle3);
    load.set_block_size(kBlockSize);
    load.set_device("cpu");
    load.set_world_size(1);
    load.set_kv_cache_memory_bytes(int64_t{1} << 20);
    load.set_num_speculative_tokens(kDrafts);  // As the server sends it.
    return load;
  }

  static std::unique_ptr<ModelRunner> Runner(const std::string& draft_dir, bool eagle = false,
                                             bool eagle3 = false) {
    auto runner = CreateCpuModelRunner();
    auto loaded = runner->LoadModel(LoadRequest(draft_dir, eagle, eagle3));
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    v1::InitCacheRequest init;
    init.set_num_gpu_blocks(kSeqs * kBlocksPerSeq);
    init.set_num_cpu_blocks(kBlocksPerSeq);
    EXPECT_TRUE(runner->InitCache(init).ok());
    return runner;
  }

  // Sequence s's step: its blocks are kBlocksPerSeq from `first_block`
  // (-1: its own region, s * kBlocksPerSeq).
  static SequenceStep StepFor(const SamplingOptions& base, int s, const std::vector<int>& output,
                              int proposals, int first_block = -1) {
    if (first_block < 0) first_block = s * kBlocksPerSeq;
    SequenceStep step;
    step.set_seq_id(s + 1);
    if (output.empty()) {
      for (int t : kPrompt) step.add_token_ids((t + 3 * s) % kVocab);
    } else {
      step.add_token_ids(output.back());
      step.set_start_position(static_cast<int>(kPrompt.size() + output.size()) - 1);
    }
    step.set_num_draft_proposals(proposals);
    for (int b = 0; b < kBlocksPerSeq; ++b) step.add_block_table(first_block + b);
    step.set_do_sample(true);
    step.set_sample_index(static_cast<int>(output.size()));
    *step.mutable_sampling() = base;
    std::map<int, int> counts;
    for (int t : output) ++counts[t];
    for (const auto& [id, count] : counts) {
      step.mutable_sampling()->add_output_token_ids(id);
      step.mutable_sampling()->add_output_token_counts(count);
    }
    return step;
  }

  // kSeqs sequences, sequence s joining at step s (its prefill beside the
  // others' proposals), each asking for up to `k` proposals per decode.
  static std::vector<Decoded> DecodeBatch(const std::string& draft_dir, const SamplingOptions& base,
                                          int k, bool eagle = false, bool eagle3 = false) {
    auto runner = Runner(draft_dir, eagle, eagle3);
    std::vector<Decoded> outs(kSeqs);
    for (int step_index = 0; step_index < 100; ++step_index) {
      StepPlan plan;
      plan.set_step_id(step_index);
      std::vector<int> members;
      for (int s = 0; s < kSeqs && s <= step_index; ++s) {
        const std::vector<int>& output = outs[s].tokens;
        if (static_cast<int>(output.size()) >= kNewTokens) continue;
        const int room = kNewTokens - static_cast<int>(output.size()) - 1;
        *plan.add_sequences() = StepFor(base, s, output, output.empty() ? 0 : std::min(k, room));
        members.push_back(s);
      }
      if (plan.sequences().empty()) break;
      auto result = runner->ExecuteStep(plan);
      EXPECT_TRUE(result.ok()) << result.status();
      if (!result.ok()) return outs;
      EXPECT_EQ(result->tokens_size(), static_cast<int>(members.size()));
      for (int i = 0; i < result->tokens_size(); ++i) {
        const v1::SampledToken& token = result->tokens(i);
        Decoded& out = outs[members[i]];
        const bool verify = plan.sequences(i).num_draft_proposals() > 0;
        EXPECT_LE(token.accepted_draft_ids_size(), plan.sequences(i).num_draft_proposals());
        for (int j = 0; j < token.accepted_draft_ids_size(); ++j) {
          out.tokens.push_back(token.accepted_draft_ids(j));
          out.top1.push_back(token.accepted_draft_top_size() > 0
                                 ? token.accepted_draft_top(j * token.top_size()).token_id()
                                 : -1);
        }
        out.tokens.push_back(token.token_id());
        out.top1.push_back(token.top_size() > 0 ? token.top(0).token_id() : -1);
        if (verify) out.accepted_per_step.push_back(token.accepted_draft_ids_size());
      }
    }
    return outs;
  }

  // One sequence decoded as the server decodes a constrained row: each step
  // asks for up to kDrafts proposals after it (num_next_draft_proposals)
  // and verifies the last step's (next_draft_ids) as draft_token_ids. The
  // tokens, and per verify step the drafts sent and accepted.
  static Decoded DecodeAhead(const std::string& draft_dir, const SamplingOptions& base,
                             bool eagle = false, std::vector<int>* sent_per_step = nullptr) {
    auto runner = Runner(draft_dir, eagle);
    Decoded out;
    std::vector<int> next;  // The last step's proposals.
    for (int step_index = 0; static_cast<int>(out.tokens.size()) < kNewTokens; ++step_index) {
      const int room = kNewTokens - static_cast<int>(out.tokens.size()) - 1;
      StepPlan plan;
      plan.set_step_id(step_index);
      SequenceStep* step = plan.add_sequences();
      *step = StepFor(base, 0, out.tokens, 0);
      const int drafts = std::min(static_cast<int>(next.size()), room);
      step->mutable_draft_token_ids()->Add(next.begin(), next.begin() + drafts);
      step->set_num_next_draft_proposals(std::max(0, std::min(kDrafts, room - drafts - 1)));
      auto result = runner->ExecuteStep(plan);
      EXPECT_TRUE(result.ok()) << result.status();
      if (!result.ok()) return out;
      const v1::SampledToken& token = result->tokens(0);
      EXPECT_LE(token.next_draft_ids_size(), step->num_next_draft_proposals());
      out.tokens.insert(out.tokens.end(), token.accepted_draft_ids().begin(),
                        token.accepted_draft_ids().end());
      out.tokens.push_back(token.token_id());
      if (drafts > 0) {
        out.accepted_per_step.push_back(token.accepted_draft_ids_size());
        if (sent_per_step != nullptr) sent_per_step->push_back(drafts);
      }
      next.assign(token.next_draft_ids().begin(), token.next_draft_ids().end());
    }
    return out;
  }

  // What a draft that is the target accepts with k proposals per step when
  // its draws are the target's own (greedy, or sampled with the same
  // options and noise): every one.
  static std::vector<int> EveryProposal(int k) {
    std::vector<int> accepted;
    for (int i = 1; i < kNewTokens;) {
      const int proposals = std::min(k, kNewTokens - i - 1);
      if (proposals > 0) accepted.push_back(proposals);
      i += proposals + 1;
    }
    return accepted;
  }

  // What the same draft would accept if it proposed its argmaxes instead:
  // each kept while the drawn token equals the argmax.
  static int ArgmaxAcceptance(const Decoded& plain, int k) {
    int total = 0;
    for (int i = 1; i < kNewTokens;) {
      const int proposals = std::min(k, kNewTokens - i - 1);
      int a = 0;
      while (a < proposals && plain.tokens[i + a] == plain.top1[i + a]) ++a;
      total += a;
      i += a + 1;
    }
    return total;
  }

  // Six steps of one sequence through DraftModel::Propose and the target's
  // Forward, accepting up to two drafts a step: the head's drafts against
  // the reference's over the same tokens. `eagle3_head`: that EAGLE-3 head
  // (a variant's name) instead of the EAGLE head.
  void ExpectReferenceDrafts(const std::string& eagle3_head) {
    auto backend = CreateCpuBackend(1);
    auto group = CreateSingleRankCommunicator();
    LlamaLoadOptions options;
    options.block_size = kBlockSize;
    auto target = LlamaModel::Load(*target_ + "/model", backend.get(), group.get(), options);
    ASSERT_TRUE(target.ok()) << target.status();
    const bool eagle3 = !eagle3_head.empty();
    auto head = DraftModel::LoadEagle(
        eagle3 ? absl::StrCat(*eagle3_, "/", eagle3_head, "/model") : *eagle_ + "/good/model",
        backend.get(), options, target->get(), eagle3);
    ASSERT_TRUE(head.ok()) << head.status();
    CacheEngine cache(backend.get(), (*target)->CacheShape(kBlockSize, DType::kF32), kBlocksPerSeq,
                      0);
    (*head)->InitCache(kBlockSize, DType::kF32, kBlocksPerSeq, 0);
    const BatchLimits limits = cache.Limits(kVocab, (*target)->max_positions());
    constexpr int kProposals = 3;
    std::vector<int> output;  // The tokens the steps "sampled": any do.
    std::string drafts, histories;
    for (int step_index = 0; step_index < 6; ++step_index) {
      StepPlan plan;
      *plan.add_sequences() =
          StepFor(SamplingOptions(), 0, output, step_index == 0 ? 0 : kProposals);
      StepPlan storage;
      absl::StatusOr<const StepPlan*> verify = (*head)->Propose(plan, limits, &storage);
      ASSERT_TRUE(verify.ok()) << verify.status();
      const SequenceStep& row = (*verify)->sequences(0);
      if (step_index > 0) {
        std::vector<int> history = kPrompt;
        history.insert(history.end(), output.begin(), output.end());
        absl::StrAppend(&histories, " --tokens ", absl::StrJoin(history, ","));
        absl::StrAppend(&drafts, drafts.empty() ? "" : "\n",
                        absl::StrJoin(row.draft_token_ids(), ","));
      }
      absl::StatusOr<FlatBatch> batch = FlattenStepPlan(**verify, limits);
      ASSERT_TRUE(batch.ok()) << batch.status();
      absl::StatusOr<ForwardOutput> forward = (*target)->Forward(*batch, &cache);
      ASSERT_TRUE(forward.ok()) << forward.status();
      (*head)->FollowTargetForward(*batch, *forward);
      v1::StepResult result;
      v1::SampledToken* token = result.add_tokens();
      token->set_seq_id(row.seq_id());
      for (int j = 0; j < std::min(2, row.draft_token_ids_size()); ++j) {
        token->add_accepted_draft_ids(row.draft_token_ids(j));
        output.push_back(row.draft_token_ids(j));
      }
      token->set_token_id(9 + step_index);
      output.push_back(token->token_id());
      (*head)->FollowStepResult(**verify, result);
    }
    EXPECT_EQ(drafts, Reference(absl::StrCat("propose --k ", kProposals, histories), eagle3_head));
  }

  // What the largest verify step did to the target's load-time buffers:
  // every sequence prefilled, then every sequence verifying kVerifyDrafts
  // drafts after the draft's passes (kSeqs x (kVerifyDrafts + 1) logits
  // rows, as many as the step's tokens: max_num_batched_tokens, so the
  // activations' share of the workspace cannot make room for them), on a
  // target loaded for `reserved_k` speculative tokens, with the draft model
  // `draft_dir` or (eagle3) that EAGLE-3 head.
  static constexpr int kVerifyDrafts = 5;  // kSeqs x 6 rows: the prefill's tokens.
  struct VerifyStepGrowth {
    uint64_t allocations = 0;  // Backend allocations during the verify step.
    uint64_t generation = 0;   // LlamaModel::buffer_generation moves since load.
  };
  static VerifyStepGrowth LargestVerifyStep(int reserved_k, const std::string& draft_dir,
                                            bool eagle3) {
    auto backend = CreateCpuBackend(1);
    auto group = CreateSingleRankCommunicator();
    const LlamaLoadOptions options{
        .weight_dtype = std::nullopt,
        .max_num_batched_tokens = kSeqs * static_cast<int>(kPrompt.size()),
        .max_num_seqs = kSeqs,
        .num_speculative_tokens = reserved_k,
        .block_size = kBlockSize};
    auto target = LlamaModel::Load(*target_ + "/model", backend.get(), group.get(), options);
    EXPECT_TRUE(target.ok()) << target.status();
    if (!target.ok()) return {};
    auto draft = eagle3 ? DraftModel::LoadEagle(draft_dir, backend.get(), options, target->get(),
                                                /*eagle3=*/true)
                        : DraftModel::Load(draft_dir, backend.get(), options, (*target)->config());
    EXPECT_TRUE(draft.ok()) << draft.status();
    if (!draft.ok()) return {};
    const uint64_t loaded_generation = (*target)->buffer_generation();
    const int blocks = kSeqs * kBlocksPerSeq;
    CacheEngine cache(backend.get(), (*target)->CacheShape(kBlockSize, DType::kF32), blocks, 0);
    (*draft)->InitCache(kBlockSize, DType::kF32, blocks, 0);
    const BatchLimits limits = cache.Limits(kVocab, (*target)->max_positions());
    SampleResults samples;
    uint64_t allocations = 0;
    std::vector<std::vector<int>> outputs(kSeqs);
    for (int step_index = 0; step_index < 2; ++step_index) {
      if (step_index == 1) allocations = backend->num_allocations();
      StepPlan plan;
      for (int s = 0; s < kSeqs; ++s) {
        *plan.add_sequences() =
            StepFor(SamplingOptions(), s, outputs[s], step_index * kVerifyDrafts);
      }
      StepPlan storage;
      absl::StatusOr<const StepPlan*> verify = (*draft)->Propose(plan, limits, &storage);
      EXPECT_TRUE(verify.ok()) << verify.status();
      if (!verify.ok()) return {};
      absl::StatusOr<FlatBatch> batch = FlattenStepPlan(**verify, limits);
      EXPECT_TRUE(batch.ok()) << batch.status();
      if (!batch.ok()) return {};
      absl::StatusOr<ForwardOutput> forward = (*target)->Forward(*batch, &cache);
      EXPECT_TRUE(forward.ok()) << forward.status();
      if (!forward.ok()) return {};
      EXPECT_EQ(forward->logits.dim(0), kSeqs * (1 + step_index * kVerifyDrafts));
      backend->Sample(forward->logits, forward->sampling, &samples);
      (*draft)->FollowTargetForward(*batch, *forward);
      v1::StepResult result;
      for (int s = 0; s < kSeqs; ++s) {
        v1::SampledToken* token = result.add_tokens();
        token->set_seq_id(s + 1);
        token->set_token_id(9 + s);
        outputs[s].push_back(9 + s);
      }
      (*draft)->FollowStepResult(**verify, result);
    }
    EXPECT_TRUE(backend->status().ok()) << backend->status();
    return {.allocations = backend->num_allocations() - allocations,
            .generation = (*target)->buffer_generation() - loaded_generation};
  }

  static std::string* target_;
  static std::string* other_;
  static std::string* small_vocab_;
  static std::string* eagle_;
  static std::string* eagle3_;
  static std::string* clone_;  // eagle_reference.py make --clone over target_.
};

std::string* DraftModelRunnerTest::target_ = nullptr;
std::string* DraftModelRunnerTest::other_ = nullptr;
std::string* DraftModelRunnerTest::small_vocab_ = nullptr;
std::string* DraftModelRunnerTest::eagle_ = nullptr;
std::string* DraftModelRunnerTest::eagle3_ = nullptr;
std::string* DraftModelRunnerTest::clone_ = nullptr;

v1::BlockMove MakeMove(int src, int dst) {
  v1::BlockMove move;
  move.set_src(src);
  move.set_dst(dst);
  return move;
}

SamplingOptions Seeded() {
  SamplingOptions sampled;
  sampled.set_temperature(1.0f);
  sampled.set_seed(42);
  sampled.set_num_logprobs(1);
  return sampled;
}

// Seeded with every logits processing option: the penalties count each
// verified row's drafts before it, whoever proposed them.
SamplingOptions SeededWithProcessing() {
  SamplingOptions sampled = Seeded();
  sampled.set_top_k(20);
  sampled.set_top_p(0.95f);
  sampled.set_min_p(0.02f);
  sampled.set_frequency_penalty(0.4f);
  sampled.set_presence_penalty(0.2f);
  sampled.set_repetition_penalty(1.2f);
  for (int t : kPrompt) sampled.add_prompt_token_ids(t);
  sampled.add_logit_bias_token_ids(7);
  sampled.add_logit_bias_values(2.0f);
  return sampled;
}

// The draft draws each draft with the sampling options and Philox noise of
// the target row that checks it (DraftBatchBuilder's sampling_row): the
// target as its own draft then proposes the target's very draws, greedy or
// at temperature 1, and every draft is accepted; with penalties and a
// logit bias (which the draft does not apply) the draws still mostly agree.
TEST_F(DraftModelRunnerTest, TargetAsDraftAcceptsEveryCoupledDraw) {
  SamplingOptions greedy;
  greedy.set_num_logprobs(1);
  for (const SamplingOptions& base : {greedy, Seeded(), SeededWithProcessing()}) {
    const std::vector<Decoded> plain = DecodeBatch("", base, 0);
    const std::vector<Decoded> speculative = DecodeBatch(*target_, base, kDrafts);
    const bool processed = base.frequency_penalty() != 0;
    int accepted = 0;
    int argmax_accepted = 0;
    for (int s = 0; s < kSeqs; ++s) {
      const std::string what = absl::StrCat("temperature ", base.temperature(), " sequence ", s);
      ASSERT_EQ(plain[s].tokens.size(), kNewTokens) << what;
      EXPECT_EQ(speculative[s].tokens, plain[s].tokens) << what;
      if (!processed) {
        EXPECT_EQ(speculative[s].accepted_per_step, EveryProposal(kDrafts)) << what;
      }
      for (int a : speculative[s].accepted_per_step) accepted += a;
      argmax_accepted += ArgmaxAcceptance(plain[s], kDrafts);
    }
    // At temperature 1 argmaxes would fare worse: the draws are not all
    // argmaxes.
    if (base.temperature() > 0) {
      EXPECT_GT(accepted, argmax_accepted) << base.DebugString();
    }
  }
  // Greedy: every draft right, 5 tokens a step; the last token is plain.
  const std::vector<Decoded> greedy_run = DecodeBatch(*target_, greedy, kDrafts);
  EXPECT_EQ(greedy_run[0].accepted_per_step, (std::vector<int>{4, 4, 4}));
}

// An EAGLE head's drafts are drawn with the noise of the target rows that
// check them, as a draft model's are: a head nearly the target
// (make --clone) at temperature 1 has its draws accepted nearly as often
// as its argmaxes are under greedy decoding, and far more often than drafts
// that are the target's own argmaxes would be (about what a near-target
// head's argmax proposals get at temperature 1). No head equals the target
// exactly (it reads the token after its position and has no final norm),
// so the bound is a rate. The tokens stay plain decoding's.
TEST_F(DraftModelRunnerTest, EagleHeadDrawsAreCoupledToTheTargets) {
  SamplingOptions greedy;
  int greedy_accepted = 0;
  for (const Decoded& run : DecodeBatch(*clone_, greedy, kDrafts, /*eagle=*/true)) {
    for (int a : run.accepted_per_step) greedy_accepted += a;
  }
  const std::vector<Decoded> plain = DecodeBatch("", Seeded(), 0);
  const std::vector<Decoded> coupled = DecodeBatch(*clone_, Seeded(), kDrafts, /*eagle=*/true);
  int accepted = 0;
  int argmax_accepted = 0;
  for (int s = 0; s < kSeqs; ++s) {
    ASSERT_EQ(plain[s].tokens.size(), kNewTokens);
    EXPECT_EQ(coupled[s].tokens, plain[s].tokens) << "sequence " << s;
    for (int a : coupled[s].accepted_per_step) accepted += a;
    argmax_accepted += ArgmaxAcceptance(plain[s], kDrafts);
  }
  // Measured: 34 greedy, 29 coupled, 16 with argmax draws (17 for the
  // target's argmaxes); both bounds fail with argmaxes.
  EXPECT_GT(4 * accepted, 3 * greedy_accepted);
  EXPECT_GE(2 * accepted, 3 * argmax_accepted);
}

// Proposing a step ahead (a constrained row's way: the server sees the
// drafts first): the proposals after each step, from its accepted tokens
// and drawn with the next step's noise, are exactly the target's next
// draws, so the target as its own draft has every one accepted, greedy and
// seeded, and the tokens are plain decoding's. Off by one position or
// sample index, or K/V left from a rejected draft, and they would not be.
// An EAGLE head proposing ahead keeps plain decoding's tokens.
TEST_F(DraftModelRunnerTest, TargetAsDraftProposingAheadAcceptsEveryDraw) {
  for (const SamplingOptions& base : {SamplingOptions(), Seeded()}) {
    const std::vector<int> plain = DecodeBatch("", base, 0)[0].tokens;
    std::vector<int> sent;
    const Decoded ahead = DecodeAhead(*target_, base, false, &sent);
    EXPECT_EQ(ahead.tokens, plain) << base.DebugString();
    EXPECT_EQ(ahead.accepted_per_step, sent) << base.DebugString();
    EXPECT_GE(sent.size(), 3u);
    std::vector<int> head_sent;
    EXPECT_EQ(DecodeAhead(*eagle_ + "/good", base, true, &head_sent).tokens, plain)
        << base.DebugString();
    EXPECT_GE(head_sent.size(), 3u);
    // A draft that is not the target: some drafts refused, the tokens kept.
    EXPECT_EQ(DecodeAhead(*other_, base).tokens, plain) << base.DebugString();
  }
}

// A sequence swapped out and in to other blocks, then copied to others
// again (copy on write), in plans that also run it: the draft's cache moves
// with the target's, so the target as its own draft still accepts all.
TEST_F(DraftModelRunnerTest, BlockMovesMoveTheDraftCacheToo) {
  SamplingOptions greedy;
  const std::vector<int> plain = DecodeBatch("", greedy, 0)[0].tokens;
  auto runner = Runner(*target_);
  std::vector<int> output;
  std::vector<int> accepted;
  int first_block = 0;
  for (int step_index = 0; static_cast<int>(output.size()) < kNewTokens; ++step_index) {
    StepPlan plan;
    plan.set_step_id(step_index);
    int moved_to = first_block;
    for (int b = 0; b < kBlocksPerSeq; ++b) {
      if (step_index == 2) {  // Out to the CPU and in at the third region.
        moved_to = 2 * kBlocksPerSeq;
        *plan.add_swap_out() = MakeMove(first_block + b, b);
        *plan.add_swap_in() = MakeMove(b, moved_to + b);
      } else if (step_index == 3) {  // Copied to the second region.
        moved_to = kBlocksPerSeq;
        *plan.add_copy() = MakeMove(first_block + b, moved_to + b);
      }
    }
    first_block = moved_to;
    const int room = kNewTokens - static_cast<int>(output.size()) - 1;
    *plan.add_sequences() =
        StepFor(greedy, 0, output, output.empty() ? 0 : std::min(kDrafts, room), first_block);
    auto result = runner->ExecuteStep(plan);
    ASSERT_TRUE(result.ok()) << result.status();
    const v1::SampledToken& token = result->tokens(0);
    output.insert(output.end(), token.accepted_draft_ids().begin(),
                  token.accepted_draft_ids().end());
    output.push_back(token.token_id());
    if (plan.sequences(0).num_draft_proposals() > 0) {
      accepted.push_back(token.accepted_draft_ids_size());
    }
  }
  EXPECT_EQ(output, plain);
  EXPECT_EQ(accepted, (std::vector<int>{4, 4, 4}));
}

TEST_F(DraftModelRunnerTest, OtherDraftKeepsPlainTokens) {
  SamplingOptions greedy;
  for (const SamplingOptions& base : {greedy, Seeded(), SeededWithProcessing()}) {
    const std::vector<Decoded> plain = DecodeBatch("", base, 0);
    const std::vector<Decoded> speculative = DecodeBatch(*other_, base, 3);
    for (int s = 0; s < kSeqs; ++s) {
      EXPECT_EQ(speculative[s].tokens, plain[s].tokens) << "sequence " << s;
      EXPECT_FALSE(speculative[s].accepted_per_step.empty());
    }
  }
}

TEST_F(DraftModelRunnerTest, BlocksCountBothCaches) {
  auto plain = CreateCpuModelRunner()->LoadModel(LoadRequest(""));
  auto with_draft = CreateCpuModelRunner()->LoadModel(LoadRequest(*other_));
  ASSERT_TRUE(plain.ok() && with_draft.ok());
  // Same shapes: the draft doubles the bytes of a block id.
  EXPECT_EQ(with_draft->bytes_per_block(), 2 * plain->bytes_per_block());
  EXPECT_EQ(with_draft->num_gpu_blocks(), plain->num_gpu_blocks() / 2);
}

TEST_F(DraftModelRunnerTest, RefusesBadProposalsAndDrafts) {
  auto vocab = CreateCpuModelRunner()->LoadModel(LoadRequest(*small_vocab_));
  EXPECT_EQ(vocab.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(vocab.status().message(), absl::StrCat("the draft model's vocab_size ", kVocab - 2,
                                                   " differs from the target's ", kVocab));

  auto check = [](ModelRunner& runner, SequenceStep step, const std::string& message) {
    StepPlan plan;
    *plan.add_sequences() = step;
    auto result = runner.ExecuteStep(plan);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_EQ(std::string(result.status().message()), message);
  };
  SequenceStep step = StepFor(SamplingOptions(), 0, {}, 2);
  auto no_draft = Runner("");
  check(*no_draft, step, "seq_id 1: num_draft_proposals, but this worker loaded no draft model");
  auto runner = Runner(*other_);
  step.set_num_draft_proposals(17);
  check(*runner, step, "seq_id 1: num_draft_proposals 17 is outside [0, 16]");
  step.set_num_draft_proposals(2);
  step.add_draft_token_ids(3);
  check(*runner, step, "seq_id 1: num_draft_proposals with draft_token_ids");
  step.clear_draft_token_ids();
  // The server builds per-position masks only for drafts it knows.
  step.set_token_mask_follows(true);
  check(*runner, step, "seq_id 1: num_draft_proposals with a token mask");
  step.set_token_mask_follows(false);
  step.set_do_sample(false);
  check(*runner, step, "seq_id 1: draft_token_ids on a row that does not sample");
  step.set_do_sample(true);
  step.mutable_block_table()->Truncate(2);  // 8 slots for 6 + 2 tokens: fits.
  step.set_num_draft_proposals(3);
  check(*runner, step, "seq_id 1: block_table has 2 blocks but 9 tokens need 3");
}

// A copy of the other draft whose config.json says 4 positions.
std::string DraftOfFourPositions(const std::string& other) {
  const std::string short_draft = other + "_4_positions";
  std::filesystem::copy(
      other, short_draft,
      std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(short_draft + "/model/config.json"));
  config["max_position_embeddings"] = 4;
  std::ofstream(short_draft + "/model/config.json") << config.dump();
  return short_draft;
}

// The speculative config's quantization key, through the runner's load
// request (draft_quantization): "fp8" quantizes a dense draft at load (a
// quarter of its f32 decoder weights' bytes) and it proposes; a method the
// draft's checkpoint is not in is refused naming the key; and an EAGLE
// head, which has no such key, refuses any.
TEST_F(DraftModelRunnerTest, DraftQuantizationIsTheDraftsOwn) {
  auto backend = CreateCpuBackend(1);
  LlamaLoadOptions options;
  options.block_size = kBlockSize;
  auto group = CreateSingleRankCommunicator();
  auto target = LlamaModel::Load(*target_ + "/model", backend.get(), group.get(), options);
  ASSERT_TRUE(target.ok()) << target.status();
  const std::string draft_dir = *other_ + "/model";
  auto dense = DraftModel::Load(draft_dir, backend.get(), options, (*target)->config());
  ASSERT_TRUE(dense.ok()) << dense.status();
  auto fp8 =
      DraftModel::Load(draft_dir, backend.get(), options, (*target)->config(), nullptr, "fp8");
  ASSERT_TRUE(fp8.ok()) << fp8.status();
  EXPECT_LT((*fp8)->weight_bytes(), (*dense)->weight_bytes());
  EXPECT_EQ(
      DraftModel::Load(draft_dir, backend.get(), options, (*target)->config(), nullptr, "awq")
          .status()
          .message(),
      "draft model: --speculative-config quantization awq does not match the checkpoint's none "
      "quantization");
  // Through the runner: the fp8 draft proposes k drafts a row.
  LoadModelRequest load = LoadRequest(*other_);
  load.set_draft_quantization("fp8");
  auto runner = CreateCpuModelRunner();
  ASSERT_TRUE(runner->LoadModel(load).ok());
  v1::InitCacheRequest init;
  init.set_num_gpu_blocks(kSeqs * kBlocksPerSeq);
  ASSERT_TRUE(runner->InitCache(init).ok());
  StepPlan plan;
  *plan.add_sequences() = StepFor(SamplingOptions(), 0, {}, kDrafts);
  absl::StatusOr<v1::StepResult> result = runner->ExecuteStep(plan);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->tokens_size(), 1);
  load = LoadRequest(*eagle_ + "/good", /*eagle=*/true);
  load.set_draft_quantization("fp8");
  EXPECT_EQ(CreateCpuModelRunner()->LoadModel(load).status().message(),
            "draft_quantization fp8 is for a draft model, not an EAGLE head");
}

// The same draft's passes, seen through DraftModel::set_pass_forward: in
// one plan, a prefill of 6 tokens without proposals is followed at its
// positions 0..3 only, beside a prompt of 3 tokens proposing 1 (positions
// 0..2, then its draft at 3); a plan whose only row is past position 3
// runs no pass.
TEST_F(DraftModelRunnerTest, DraftOfFewerPositionsFollowsRowsOnlyBelowThem) {
  const std::string short_draft = DraftOfFourPositions(*other_);
  auto backend = CreateCpuBackend(1);
  auto group = CreateSingleRankCommunicator();
  LlamaLoadOptions options;
  options.block_size = kBlockSize;
  auto target = LlamaModel::Load(*target_ + "/model", backend.get(), group.get(), options);
  ASSERT_TRUE(target.ok()) << target.status();
  auto draft =
      DraftModel::Load(short_draft + "/model", backend.get(), options, (*target)->config());
  ASSERT_TRUE(draft.ok()) << draft.status();
  const int blocks = 2 * kBlocksPerSeq;
  CacheEngine cache(backend.get(), (*target)->CacheShape(kBlockSize, DType::kF32), blocks, 0);
  (*draft)->InitCache(kBlockSize, DType::kF32, blocks, 0);
  std::vector<std::vector<int32_t>> pass_positions;
  (*draft)->set_pass_forward([&](const FlatBatch& batch) {
    pass_positions.push_back(batch.positions);
    return (*draft)->model()->Forward(batch, (*draft)->cache());
  });
  const BatchLimits limits = cache.Limits(kVocab, (*target)->max_positions());
  StepPlan plan;
  *plan.add_sequences() = StepFor(SamplingOptions(), 0, {}, 0);
  SequenceStep* proposing = plan.add_sequences();
  *proposing = StepFor(SamplingOptions(), 1, {}, 1);
  proposing->mutable_token_ids()->Truncate(3);
  StepPlan storage;
  absl::StatusOr<const StepPlan*> verify = (*draft)->Propose(plan, limits, &storage);
  ASSERT_TRUE(verify.ok()) << verify.status();
  EXPECT_EQ(pass_positions, (std::vector<std::vector<int32_t>>{{0, 1, 2, 3, 0, 1, 2}, {3}}));
  pass_positions.clear();
  StepPlan past;
  *past.add_sequences() = StepFor(SamplingOptions(), 0, {7}, 0);  // Position 6.
  verify = (*draft)->Propose(past, limits, &storage);
  ASSERT_TRUE(verify.ok()) << verify.status();
  EXPECT_TRUE(pass_positions.empty());
  std::filesystem::remove_all(short_draft);
}

// A draft model of 4 positions under a target of more: a prefill of 6
// tokens runs with the target's token (the draft follows the rows below its
// positions only); proposals whose passes reach position 4 or past are
// refused, naming the seq_id, this step's and the next step's alike, while
// one proposal after 3 tokens (position 3) runs.
TEST_F(DraftModelRunnerTest, DraftOfFewerPositionsRefusesProposalsPastThem) {
  const std::string short_draft = DraftOfFourPositions(*other_);
  auto plan_of = [](const SequenceStep& step) {
    StepPlan plan;
    *plan.add_sequences() = step;
    return plan;
  };
  const SequenceStep prefill = StepFor(SamplingOptions(), 0, {}, 0);
  auto plain = Runner("")->ExecuteStep(plan_of(prefill));
  auto runner = Runner(short_draft);
  auto followed = runner->ExecuteStep(plan_of(prefill));
  ASSERT_TRUE(plain.ok() && followed.ok()) << plain.status() << followed.status();
  EXPECT_EQ(followed->tokens(0).token_id(), plain->tokens(0).token_id());

  auto refused = [&](const SequenceStep& step, int position) {
    auto result = runner->ExecuteStep(plan_of(step));
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << position;
    EXPECT_EQ(std::string(result.status().message()),
              absl::StrCat("seq_id 1: draft proposals reach position ", position,
                           ", outside the draft model's rotary table [0, 4)"));
  };
  SequenceStep decode = StepFor(SamplingOptions(), 0, {7}, 1);  // Token 7 at position 6.
  refused(decode, 7);
  decode.set_num_draft_proposals(0);
  decode.set_num_next_draft_proposals(2);
  refused(decode, 8);
  // A short prompt: 3 tokens, then 1 proposal at position 3, the last the
  // draft holds; 2 reach position 4.
  SequenceStep short_prompt = prefill;
  short_prompt.set_seq_id(1);
  short_prompt.mutable_token_ids()->Truncate(3);
  short_prompt.set_num_draft_proposals(1);
  auto drafted = Runner(short_draft)->ExecuteStep(plan_of(short_prompt));
  EXPECT_TRUE(drafted.ok()) << drafted.status();
  short_prompt.set_num_draft_proposals(2);
  refused(short_prompt, 4);
  std::filesystem::remove_all(short_draft);
}

// LoadModelRequest.num_speculative_tokens outside [0, 16] is refused at
// load, naming the range.
TEST_F(DraftModelRunnerTest, RefusesSpeculativeTokensOutOfRange) {
  for (int k : {-1, 17}) {
    LoadModelRequest load = LoadRequest(*other_);
    load.set_num_speculative_tokens(k);
    auto loaded = CreateCpuModelRunner()->LoadModel(load);
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << k;
    EXPECT_EQ(std::string(loaded.status().message()),
              absl::StrCat("num_speculative_tokens must be in [0, 16], got ", k));
  }
}

// Proposals for the next step (a constrained row's): refused without a
// draft model, out of range, beside this step's proposals, on a row that
// does not sample, and when the block table cannot hold them once every
// draft is accepted (6 tokens and 1 draft, then 3 proposals: 10 slots).
TEST_F(DraftModelRunnerTest, RefusesBadNextStepProposals) {
  auto check = [](ModelRunner& runner, const SequenceStep& step, const std::string& message) {
    StepPlan plan;
    *plan.add_sequences() = step;
    auto result = runner.ExecuteStep(plan);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_EQ(std::string(result.status().message()), message);
  };
  SequenceStep step = StepFor(SamplingOptions(), 0, {}, 0);
  step.set_num_next_draft_proposals(2);
  check(*Runner(""), step,
        "seq_id 1: num_next_draft_proposals, but this worker loaded no draft model");
  auto runner = Runner(*other_);
  step.set_num_next_draft_proposals(17);
  check(*runner, step, "seq_id 1: num_next_draft_proposals 17 is outside [0, 16]");
  step.set_num_next_draft_proposals(-1);
  check(*runner, step, "seq_id 1: num_next_draft_proposals -1 is outside [0, 16]");
  step.set_num_next_draft_proposals(2);
  step.set_num_draft_proposals(2);
  check(*runner, step, "seq_id 1: num_next_draft_proposals with num_draft_proposals");
  step.set_num_draft_proposals(0);
  step.set_do_sample(false);
  check(*runner, step, "seq_id 1: num_next_draft_proposals on a row that does not sample");
  step.set_do_sample(true);
  step.add_draft_token_ids(3);
  step.set_num_next_draft_proposals(3);
  step.mutable_block_table()->Truncate(2);
  check(*runner, step,
        "num_next_draft_proposals do not fit: seq_id 1: block_table has 2 blocks but 10 tokens "
        "need 3");
  // With room for them, the step runs and returns them.
  step.add_block_table(2);
  auto result = runner->ExecuteStep([&] {
    StepPlan plan;
    *plan.add_sequences() = step;
    return plan;
  }());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->tokens(0).next_draft_ids_size(), 3);
}

// The head's drafts over the target's own hidden states, in six steps of
// one sequence: a prefill, then steps whose first two drafts the result
// calls accepted (so each step's head rows read the target's rows of the
// last step's input and two drafts). Each step's drafts equal the
// float64 reference's for the same tokens, which holds only with the fc's
// two halves in order, layer 0 without its input norm, no final norm, the
// target's embeddings and lm_head, its final-normed hidden states, and the
// rows kept per step.
// LoadModelRequest.num_speculative_tokens reserves the verify steps' logits
// rows at load: the largest verify step and its draft's passes allocate
// nothing, and the target's buffers stay put (the CUDA runner's graphs stay
// on only while they do). Without it the same step grows the workspace.
TEST_F(DraftModelRunnerTest, TheLargestVerifyStepFitsTheLoadTimeReservation) {
  const VerifyStepGrowth reserved = LargestVerifyStep(kVerifyDrafts, *other_ + "/model", false);
  EXPECT_EQ(reserved.allocations, 0u);
  EXPECT_EQ(reserved.generation, 0u);
  const VerifyStepGrowth unreserved = LargestVerifyStep(0, *other_ + "/model", false);
  EXPECT_GT(unreserved.allocations, 0u);
  EXPECT_GT(unreserved.generation, 0u);
}

// An EAGLE-3 target's aux rows (its head's features) are reserved at load
// too, at one address: a prefill of the load-time tokens moves nothing.
TEST_F(DraftModelRunnerTest, Eagle3AuxRowsAreReservedAtLoad) {
  const VerifyStepGrowth growth = LargestVerifyStep(kVerifyDrafts, *eagle3_ + "/good/model", true);
  EXPECT_EQ(growth.allocations, 0u);
  EXPECT_EQ(growth.generation, 0u);
}

TEST_F(DraftModelRunnerTest, EagleDraftsEqualTheFloat64Reference) { ExpectReferenceDrafts(""); }

// The same for EAGLE-3 heads: the target's embeddings, the head's own,
// norm_before_residual (good's weights, the normed hidden as the residual),
// two_layers (good's first layer, then a plain Llama layer over the
// residual stream: vLLM's num_hidden_layers > 1) and no_aux (good's weights
// without the fc: use_aux_hidden_state false, the target's final-normed
// hidden state the feature). The reference's drafts differ for each.
TEST_F(DraftModelRunnerTest, Eagle3DraftsEqualTheFloat64Reference) {
  // no_d2t: a smaller draft vocabulary without d2t, draft id d as target id d.
  for (const char* head :
       {"good", "own_embed", "norm_before_residual", "two_layers", "no_aux", "no_d2t"}) {
    SCOPED_TRACE(head);
    ExpectReferenceDrafts(head);
  }
}

// Through the CPU runner: three sequences (joining at steps 0, 1, 2) with
// an EAGLE head, greedy, seeded and seeded with every processing option:
// plain decoding's tokens; and greedy sequence 0's tokens and acceptance
// per step are the reference's speculative decoding.
TEST_F(DraftModelRunnerTest, EagleKeepsPlainTokensAndTheReferenceAcceptance) {
  SamplingOptions greedy;
  for (const SamplingOptions& base : {greedy, SeededWithProcessing()}) {
    const std::vector<Decoded> plain = DecodeBatch("", base, 0);
    const std::vector<Decoded> speculative =
        DecodeBatch(*eagle_ + "/good", base, kDrafts, /*eagle=*/true);
    for (int s = 0; s < kSeqs; ++s) {
      ASSERT_EQ(plain[s].tokens.size(), kNewTokens);
      EXPECT_EQ(speculative[s].tokens, plain[s].tokens) << "sequence " << s;
      EXPECT_FALSE(speculative[s].accepted_per_step.empty());
    }
    if (base.temperature() != 0) continue;
    EXPECT_EQ(absl::StrCat("{\"tokens\": [", absl::StrJoin(speculative[0].tokens, ", "),
                           "], \"accepted\": [",
                           absl::StrJoin(speculative[0].accepted_per_step, ", "), "]}"),
              Reference(absl::StrCat("simulate --k ", kDrafts, " --max-tokens ", kNewTokens,
                                     " --tokens ", absl::StrJoin(kPrompt, ","))));
  }
}

// One line naming the tensor and shape, or both sizes (the server checks
// the config and fc first, scheduler/startup/draft_model_files.h).
TEST_F(DraftModelRunnerTest, RefusesMalformedEagleHeadsAtLoad) {
  const std::pair<std::string, std::string> heads[] = {
      {"no_fc", "EAGLE head: weight \"fc.weight\" not found in the model"},
      {"fc_shape", "EAGLE head: weight \"fc.weight\" has shape [32, 32], expected [32, 64]"},
      {"no_down_proj",
       "EAGLE head: weight \"layers.0.mlp.down_proj.weight\" not found in the model"},
      {"other_vocab", absl::StrCat("the EAGLE head's vocab_size ", kVocab - 2,
                                   " differs from the target's ", kVocab)},
  };
  for (const auto& [name, message] : heads) {
    auto loaded =
        CreateCpuModelRunner()->LoadModel(LoadRequest(*eagle_ + "/" + name, /*eagle=*/true));
    EXPECT_EQ(std::string(loaded.status().message()), message);
  }
}

// An EAGLE-3 head, greedy and seeded with every processing option: plain
// decoding's tokens; greedy sequence 0's tokens and acceptance per step are
// the reference's speculative decoding.
TEST_F(DraftModelRunnerTest, Eagle3KeepsPlainTokensAndTheReferenceAcceptance) {
  SamplingOptions greedy;
  for (const SamplingOptions& base : {greedy, SeededWithProcessing()}) {
    const std::vector<Decoded> plain = DecodeBatch("", base, 0);
    // A two-layer head and one without aux hidden states, greedy: plain
    // decoding's tokens too (their drafts are the reference's above).
    for (const char* head : {"/two_layers", "/no_aux"}) {
      if (base.temperature() != 0) break;
      const std::vector<Decoded> other =
          DecodeBatch(*eagle3_ + head, base, kDrafts, /*eagle=*/false, /*eagle3=*/true);
      for (int s = 0; s < kSeqs; ++s) {
        EXPECT_EQ(other[s].tokens, plain[s].tokens) << head << " sequence " << s;
        EXPECT_FALSE(other[s].accepted_per_step.empty()) << head;
      }
    }
    const std::vector<Decoded> speculative =
        DecodeBatch(*eagle3_ + "/good", base, kDrafts, /*eagle=*/false, /*eagle3=*/true);
    for (int s = 0; s < kSeqs; ++s) {
      ASSERT_EQ(plain[s].tokens.size(), kNewTokens);
      EXPECT_EQ(speculative[s].tokens, plain[s].tokens) << "sequence " << s;
      EXPECT_FALSE(speculative[s].accepted_per_step.empty());
    }
    if (base.temperature() != 0) continue;
    EXPECT_EQ(absl::StrCat("{\"tokens\": [", absl::StrJoin(speculative[0].tokens, ", "),
                           "], \"accepted\": [",
                           absl::StrJoin(speculative[0].accepted_per_step, ", "), "]}"),
              Reference(absl::StrCat("simulate --k ", kDrafts, " --max-tokens ", kNewTokens,
                                     " --tokens ", absl::StrJoin(kPrompt, ",")),
                        "good"));
  }
}

// <heads>/<name>: a copy of <heads>/good whose config.json has `patch`
// merged in.
std::string PatchedHead(const std::string& heads, const std::string& name,
                        const nlohmann::json& patch) {
  const std::string out = heads + "/" + name;
  std::filesystem::copy(
      heads + "/good", out,
      std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
  std::ifstream in(out + "/model/config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config.merge_patch(patch);
  std::ofstream(out + "/model/config.json") << config.dump();
  return out;
}

// A head whose config.json says 8 positions drafts past them, at the
// target's positions (the sequences reach position 26), as vLLM raises its
// max_position_embeddings: greedy, plain decoding's tokens, and the very
// acceptance per step of the same head at its own 64 positions (the raise
// sizes the rotary table and changes no rotation).
TEST_F(DraftModelRunnerTest, EagleHeadsDraftPastTheirOwnPositions) {
  SamplingOptions greedy;
  const std::vector<Decoded> plain = DecodeBatch("", greedy, 0);
  for (bool eagle3 : {false, true}) {
    const std::string& heads = eagle3 ? *eagle3_ : *eagle_;
    const std::string short_head = PatchedHead(heads, "short", {{"max_position_embeddings", 8}});
    const std::vector<Decoded> own = DecodeBatch(heads + "/good", greedy, kDrafts, !eagle3, eagle3);
    const std::vector<Decoded> raised = DecodeBatch(short_head, greedy, kDrafts, !eagle3, eagle3);
    for (int s = 0; s < kSeqs; ++s) {
      SCOPED_TRACE(absl::StrCat(eagle3 ? "EAGLE-3" : "EAGLE", " sequence ", s));
      ASSERT_EQ(plain[s].tokens.size(), kNewTokens);
      EXPECT_EQ(raised[s].tokens, plain[s].tokens);
      EXPECT_FALSE(raised[s].accepted_per_step.empty());
      EXPECT_EQ(raised[s].accepted_per_step, own[s].accepted_per_step);
    }
  }
}

// The raised head's rotations are its own config's: an EAGLE-3 head of 8
// positions with llama3 rope scaling (original_max_position_embeddings 16,
// factor 8) drafts, past position 8, what the float64 reference computes
// from that config's frequencies.
TEST_F(DraftModelRunnerTest, RaisedEagle3HeadKeepsItsOwnRopeScaling) {
  PatchedHead(*eagle3_, "short_llama3",
              {{"max_position_embeddings", 8},
               {"rope_scaling",
                {{"rope_type", "llama3"},
                 {"factor", 8.0},
                 {"low_freq_factor", 1.0},
                 {"high_freq_factor", 4.0},
                 {"original_max_position_embeddings", 16}}}});
  ExpectReferenceDrafts("short_llama3");
}

// One line naming the tensor, the key or the values.
TEST_F(DraftModelRunnerTest, RefusesMalformedEagle3HeadsAtLoad) {
  const std::pair<std::string, std::string> heads[] = {
      {"no_fc", "EAGLE-3 head: weight \"fc.weight\" not found in the model"},
      {"fc_shape", "EAGLE-3 head: weight \"fc.weight\" has shape [32, 64], expected [32, 96]"},
      {"no_hidden_norm",
       "EAGLE-3 head: weight \"midlayer.hidden_norm.weight\" not found in the model"},
      {"default_layers",
       "EAGLE-3 head: eagle_aux_hidden_state_layer_ids [2, 1, -1] are not all layers of the "
       "target's 2"},
  };
  for (const auto& [name, message] : heads) {
    auto loaded = CreateCpuModelRunner()->LoadModel(
        LoadRequest(*eagle3_ + "/" + name, /*eagle=*/false, /*eagle3=*/true));
    EXPECT_EQ(std::string(loaded.status().message()), message);
  }
  // A config key of the wrong type: one line, not an exception.
  const std::string bad_flag = *eagle3_ + "/bad_flag";
  std::filesystem::copy(*eagle3_ + "/good", bad_flag, std::filesystem::copy_options::recursive);
  std::ifstream in(bad_flag + "/model/config.json");
  const std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string flagged = absl::StrReplaceAll(
      config, {{"\"num_hidden_layers\": 1",
                "\"num_hidden_layers\": 1, \"eagle_config\": {\"use_aux_hidden_state\": \"no\"}"}});
  ASSERT_NE(flagged, config);
  std::ofstream(bad_flag + "/model/config.json") << flagged;
  EXPECT_EQ(CreateCpuModelRunner()
                ->LoadModel(LoadRequest(bad_flag, /*eagle=*/false, /*eagle3=*/true))
                .status()
                .message(),
            "EAGLE-3 head: eagle_config.use_aux_hidden_state is not a boolean");
  auto loaded = CreateCpuModelRunner()->LoadModel(
      LoadRequest(*eagle3_ + "/d2t_range", /*eagle=*/false, /*eagle3=*/true));
  EXPECT_TRUE(absl::StartsWith(loaded.status().message(), "EAGLE-3 head: d2t maps draft id 39 to "))
      << loaded.status();
  // A head is never a target.
  LoadModelRequest as_target = LoadRequest("");
  as_target.set_model_dir(*eagle3_ + "/good/model");
  EXPECT_EQ(CreateCpuModelRunner()->LoadModel(as_target).status().message(),
            absl::StrCat(*eagle3_,
                         "/good/model is an EAGLE-3 head (LlamaForCausalLMEagle3): serve it as "
                         "--speculative-config's model with method eagle3"));
}

}  // namespace
}  // namespace pagoda::worker
