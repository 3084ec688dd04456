// Speculative decoding's draft model and EAGLE / EAGLE-3 heads on the CUDA
// runner (needs a GPU; skipped by exit code without one), on random-weight
// models shaped for the CUDA kernels (head 64):
// - exactness: three greedy sequences decoded through CreateCudaModelRunner
//   with a draft (a one-layer random draft model, the target as its own
//   draft, an EAGLE head that is nearly the target, a random EAGLE-3 head)
//   give the tokens the target alone gives on the same runner, up to the
//   first position where the target's two best logprobs are within bf16
//   rounding of each other (a verify step's k + 1 rows and a decode step's
//   one row round differently, so such a near-tie may flip either way);
// - memory: a block id costs the target's bytes and the draft's;
// - acceptance: the target as its own draft, and the near-target EAGLE
//   head, get drafts accepted (greedy and seeded: coupled draws);
// - graphs (issue 46's GPU figure needs them on): with drafts asked every
//   other step, the steps that ask none replay the target's decode graphs
//   and the verify steps between them its verify graphs (k + 1 rows a
//   sequence, within the load-time reservation: num_speculative_tokens),
//   with a draft model and EAGLE / EAGLE-3 heads alike, and a draft
//   model's one-row passes replay graphs over the draft; the graphs stay on
//   to the end, and the tokens equal an --enforce-eager runner's up to
//   near-ties;
// - decode fusions (issue 49, CudaDecodeFusions::All): the plain runner's
//   greedy tokens up to near-ties, with graphs, eagerly, with a draft and
//   over an FP8 cache;
// - proposals: DraftModel::Propose over the same fed tokens proposes on the
//   CUDA backend (bf16) what it proposes on the CPU backend (f32) for at
//   least two thirds of the drafts (a broken device path agrees on about
//   1 in 256; bf16 flips a near-tie now and then, which loses the rest of
//   that step's chain).

#include <stdlib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/cache_engine.h"
#include "worker/communicator.h"
#include "worker/cpu/cpu_backend.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/cuda/cuda_model_runner.h"
#include "worker/draft_model.h"
#include "worker/flat_batch.h"
#include "worker/llama_model.h"
#include "worker/model_runner.h"

namespace pagoda::worker {
namespace {

using v1::LoadModelRequest;
using v1::SamplingOptions;
using v1::SequenceStep;
using v1::StepPlan;

constexpr int kBlockSize = 16;
constexpr int kBlocksPerSeq = 3;  // 48 positions: prompt 6, 24 new, drafts past them.
constexpr int kSeqs = 3;
constexpr int kVocab = 256;
constexpr int kNewTokens = 24;
constexpr int kDrafts = 4;
// Two logprobs this close (nats) are a near-tie for bf16 logits: about ten
// times the rounding a random model's logits (spread ~0.3) carry.
constexpr float kNearTie = 0.05f;
const std::vector<int> kPrompt = {5, 17, 3, 42, 8, 11};

// A draft: its folder under the test's models, and its method.
struct DraftCase {
  std::string name;  // <models>/<name>/model
  bool eagle = false;
  bool eagle3 = false;
};

// How Decode runs: eagerly (--enforce-eager) or with graphs, asking for
// drafts every step or every other one (the steps between are plain
// decodes, which replay a graph), and where the runner's graph counts go.
struct DecodeOptions {
  bool enforce_eager = false;
  bool every_other_step = false;
  CudaGraphCounts* counts = nullptr;
  CudaDecodeFusions fusions = {};   // The runner's (CudaRunnerOptions::decode_fusions).
  std::string kv_cache_dtype = "";  // LoadModelRequest's; empty: the serving dtype
};

struct Decoded {
  std::vector<int> tokens;
  std::vector<float> top_gap;  // Per position, the best logprob minus the second.
  int asked = 0;               // Proposals the plans asked for.
  int accepted = 0;
};

std::string Env(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

// The target, a one-layer draft model of its vocabulary, an EAGLE head that
// is nearly the target (eagle_reference.py make --clone) and an EAGLE-3
// head (eagle3_reference.py make), every one with head size 64.
std::string MakeModels() {
  std::string dir = "/tmp/pagoda_cuda_draft_XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp " << dir;
    return "";
  }
  const std::string python = Env("PAGODA_PYTHON3", "/usr/bin/python3");
  const std::string source = Env("PAGODA_SOURCE_DIR", ".");
  auto llama = [&](const std::string& out, int layers, int intermediate, int seed) {
    return absl::StrCat(python, " ", source, "/scripts/make_tiny_model.py --out ", out,
                        " --arch llama --vocab-size ", kVocab, " --hidden-size 256",
                        " --intermediate-size ", intermediate, " --num-layers ", layers,
                        " --num-heads 4 --num-kv-heads 2 --head-dim 64",
                        " --max-position-embeddings 128 --dtype f32 --seed ", seed, " > /dev/null");
  };
  const std::string command = absl::StrCat(
      llama(dir + "/target/model", 2, 512, 11), " && ", llama(dir + "/other/model", 1, 384, 5),
      " && ", python, " ", source, "/tests/reference/eagle_reference.py make --clone --source ",
      dir, "/target/model --out ", dir, "/clone/model > /dev/null && ",
      llama(dir + "/eagle3_source", 1, 384, 3), " && ", python, " ", source,
      "/tests/reference/eagle3_reference.py make --source ", dir, "/eagle3_source --target-vocab ",
      kVocab, " --out ", dir, "/eagle3/model > /dev/null");
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  return dir;
}

SamplingOptions Greedy() {
  SamplingOptions greedy;
  greedy.set_num_logprobs(2);  // The top two: near-ties are judged on them.
  return greedy;
}

SamplingOptions Seeded() {
  SamplingOptions sampled;
  sampled.set_temperature(1.0f);
  sampled.set_seed(42);
  sampled.set_num_logprobs(2);
  return sampled;
}

// Sequence s's step after `output`, in its own blocks, asking for
// `proposals` drafts; the output's counts folded in as the server does.
SequenceStep StepFor(const SamplingOptions& base, int s, const std::vector<int>& output,
                     int proposals) {
  SequenceStep step;
  step.set_seq_id(s + 1);
  if (output.empty()) {
    for (int t : kPrompt) step.add_token_ids((t + 3 * s) % kVocab);
  } else {
    step.add_token_ids(output.back());
    step.set_start_position(static_cast<int>(kPrompt.size() + output.size()) - 1);
  }
  step.set_num_draft_proposals(proposals);
  for (int b = 0; b < kBlocksPerSeq; ++b) step.add_block_table(s * kBlocksPerSeq + b);
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

float TopGap(const google::protobuf::RepeatedPtrField<v1::TokenLogprob>& top, int first) {
  if (top.size() < first + 2) return 0;
  return top[first].logprob() - top[first + 1].logprob();
}

class CudaDraftTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { models_ = new std::string(MakeModels()); }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*models_);
    delete models_;
  }

  static std::string ModelDir(const std::string& name) {
    return absl::StrCat(*models_, "/", name, "/model");
  }

  // The CUDA runner over the target, with `draft` (none when null), its
  // cache of kSeqs * kBlocksPerSeq blocks; null after a failure (reported).
  // `response`, when set, receives LoadModel's answer.
  static std::unique_ptr<ModelRunner> CudaRunner(const DraftCase* draft,
                                                 v1::LoadModelResponse* response = nullptr,
                                                 const DecodeOptions& options = {}) {
    auto runner =
        CreateCudaModelRunner(CudaRunnerOptions{.device = 0, .decode_fusions = options.fusions});
    LoadModelRequest load;
    load.set_model_dir(ModelDir("target"));
    load.set_device("cuda");
    load.set_world_size(1);
    load.set_block_size(kBlockSize);
    load.set_gpu_memory_utilization(0.3f);
    load.set_max_num_batched_tokens(256);
    load.set_max_num_seqs(8);
    load.set_num_speculative_tokens(kDrafts);
    load.set_enforce_eager(options.enforce_eager);
    load.set_kv_cache_dtype(options.kv_cache_dtype);
    if (draft != nullptr) {
      load.set_draft_model_dir(ModelDir(draft->name));
      load.set_draft_is_eagle_head(draft->eagle);
      load.set_draft_is_eagle3_head(draft->eagle3);
    }
    auto loaded = runner->LoadModel(load);
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    if (!loaded.ok()) return nullptr;
    EXPECT_GE(loaded->num_gpu_blocks(), kSeqs * kBlocksPerSeq);
    if (response != nullptr) *response = *loaded;
    v1::InitCacheRequest init;
    init.set_num_gpu_blocks(kSeqs * kBlocksPerSeq);
    const absl::Status cached = runner->InitCache(init);
    EXPECT_TRUE(cached.ok()) << cached;
    return cached.ok() ? std::move(runner) : nullptr;
  }

  // kSeqs sequences, sequence s joining at step s (its prefill beside the
  // others' verify rows), each decode asking for up to `k` proposals.
  static std::vector<Decoded> Decode(const DraftCase* draft, const SamplingOptions& base, int k,
                                     const DecodeOptions& options = {}) {
    std::vector<Decoded> outs(kSeqs);
    auto runner = CudaRunner(draft, nullptr, options);
    if (runner == nullptr) return outs;
    for (int step_index = 0; step_index < 100; ++step_index) {
      StepPlan plan;
      plan.set_step_id(step_index);
      std::vector<int> members;
      for (int s = 0; s < kSeqs && s <= step_index; ++s) {
        const int done = static_cast<int>(outs[s].tokens.size());
        if (done >= kNewTokens) continue;
        const bool asks = !options.every_other_step || step_index % 2 == 0;
        const int proposals = done == 0 || !asks ? 0 : std::min(k, kNewTokens - done - 1);
        *plan.add_sequences() = StepFor(base, s, outs[s].tokens, proposals);
        outs[s].asked += proposals;
        members.push_back(s);
      }
      if (plan.sequences().empty()) break;
      auto result = runner->ExecuteStep(plan);
      if (options.counts != nullptr) *options.counts = CudaRunnerGraphCounts(*runner);
      EXPECT_TRUE(result.ok()) << result.status();
      if (!result.ok()) return outs;
      EXPECT_EQ(result->tokens_size(), static_cast<int>(members.size()));
      for (int i = 0; i < result->tokens_size() && i < static_cast<int>(members.size()); ++i) {
        const v1::SampledToken& token = result->tokens(i);
        Decoded& out = outs[members[i]];
        EXPECT_LE(token.accepted_draft_ids_size(), plan.sequences(i).num_draft_proposals());
        const int top = token.top_size();
        for (int j = 0; j < token.accepted_draft_ids_size(); ++j) {
          out.tokens.push_back(token.accepted_draft_ids(j));
          out.top_gap.push_back(TopGap(token.accepted_draft_top(), j * top));
        }
        out.accepted += token.accepted_draft_ids_size();
        out.tokens.push_back(token.token_id());
        out.top_gap.push_back(TopGap(token.top(), 0));
      }
    }
    return outs;
  }

  // Each sequence's tokens equal `plain`'s, or first differ where plain's
  // two best logprobs were a near-tie.
  static void ExpectPlainTokensUpToNearTies(const std::vector<Decoded>& plain,
                                            const std::vector<Decoded>& speculative,
                                            const std::string& what) {
    for (int s = 0; s < kSeqs; ++s) {
      const std::vector<int>& want = plain[s].tokens;
      const std::vector<int>& got = speculative[s].tokens;
      ASSERT_EQ(want.size(), static_cast<size_t>(kNewTokens)) << what;
      ASSERT_EQ(got.size(), static_cast<size_t>(kNewTokens)) << what << ", sequence " << s;
      const auto diverged = std::mismatch(want.begin(), want.end(), got.begin());
      if (diverged.first == want.end()) continue;
      const size_t at = diverged.first - want.begin();
      EXPECT_LT(plain[s].top_gap[at], kNearTie)
          << what << ": sequence " << s << " left plain decoding at token " << at << " ("
          << *diverged.second << " for " << *diverged.first << ") where the target was decisive";
    }
  }

  // Six steps of one sequence through DraftModel::Propose on `backend`,
  // the target following (an EAGLE head reads its hidden states), two
  // drafts accepted a step and then the fed token 9 + step: the drafts of
  // each step after the prefill.
  static std::vector<std::vector<int>> ProposeSteps(std::unique_ptr<Backend> backend,
                                                    std::optional<DType> dtype,
                                                    const DraftCase& draft_case) {
    constexpr int kProposals = 3;
    std::vector<std::vector<int>> drafts;
    auto group = CreateSingleRankCommunicator();
    const LlamaLoadOptions options{.weight_dtype = dtype,
                                   .max_num_batched_tokens = 256,
                                   .max_num_seqs = 8,
                                   .block_size = kBlockSize};
    auto target = LlamaModel::Load(ModelDir("target"), backend.get(), group.get(), options);
    EXPECT_TRUE(target.ok()) << target.status();
    if (!target.ok()) return drafts;
    const bool eagle = draft_case.eagle || draft_case.eagle3;
    auto draft = eagle ? DraftModel::LoadEagle(ModelDir(draft_case.name), backend.get(), options,
                                               target->get(), draft_case.eagle3)
                       : DraftModel::Load(ModelDir(draft_case.name), backend.get(), options,
                                          (*target)->config());
    EXPECT_TRUE(draft.ok()) << draft.status();
    if (!draft.ok()) return drafts;
    const DType kv = backend->default_kv_cache_dtype();
    CacheEngine cache(backend.get(), (*target)->CacheShape(kBlockSize, kv), kBlocksPerSeq, 0);
    (*draft)->InitCache(kBlockSize, kv, kBlocksPerSeq, 0);
    const BatchLimits limits = cache.Limits(kVocab, (*target)->max_positions());
    std::vector<int> output;
    for (int step_index = 0; step_index < 6; ++step_index) {
      StepPlan plan;
      *plan.add_sequences() =
          StepFor(SamplingOptions(), 0, output, step_index == 0 ? 0 : kProposals);
      StepPlan storage;
      absl::StatusOr<const StepPlan*> verify = (*draft)->Propose(plan, limits, &storage);
      EXPECT_TRUE(verify.ok()) << verify.status();
      if (!verify.ok()) return drafts;
      const SequenceStep& row = (*verify)->sequences(0);
      if (step_index > 0)
        drafts.emplace_back(row.draft_token_ids().begin(), row.draft_token_ids().end());
      absl::StatusOr<FlatBatch> batch = FlattenStepPlan(**verify, limits);
      EXPECT_TRUE(batch.ok()) << batch.status();
      if (!batch.ok()) return drafts;
      absl::StatusOr<ForwardOutput> forward = (*target)->Forward(*batch, &cache);
      EXPECT_TRUE(forward.ok()) << forward.status();
      if (!forward.ok()) return drafts;
      (*draft)->FollowTargetForward(*batch, *forward);
      v1::StepResult result;
      v1::SampledToken* token = result.add_tokens();
      token->set_seq_id(row.seq_id());
      for (int j = 0; j < std::min(2, row.draft_token_ids_size()); ++j) {
        token->add_accepted_draft_ids(row.draft_token_ids(j));
        output.push_back(row.draft_token_ids(j));
      }
      token->set_token_id(9 + step_index);
      output.push_back(token->token_id());
      (*draft)->FollowStepResult(**verify, result);
    }
    EXPECT_TRUE(backend->status().ok()) << backend->status();
    return drafts;
  }

  static std::string* models_;
};

std::string* CudaDraftTest::models_ = nullptr;

int Sum(const std::vector<Decoded>& runs, int Decoded::*field) {
  int total = 0;
  for (const Decoded& run : runs) total += run.*field;
  return total;
}

// One block id spans the target's cache and the draft's, so a block costs
// both (the one-layer draft: half the two-layer target's bytes again).
TEST_F(CudaDraftTest, ABlockHoldsTheTargetsAndTheDraftsLayers) {
  v1::LoadModelResponse plain, with_draft;
  ASSERT_NE(CudaRunner(nullptr, &plain), nullptr);
  const DraftCase other{"other"};
  ASSERT_NE(CudaRunner(&other, &with_draft), nullptr);
  EXPECT_EQ(2 * with_draft.bytes_per_block(), 3 * plain.bytes_per_block());
  EXPECT_LE(with_draft.num_gpu_blocks(), plain.num_gpu_blocks());
}

TEST_F(CudaDraftTest, DraftModelKeepsTheTargetsGreedyTokens) {
  const std::vector<Decoded> plain = Decode(nullptr, Greedy(), 0);
  for (const DraftCase& draft : {DraftCase{"other"}, DraftCase{"target"}}) {
    const std::vector<Decoded> speculative = Decode(&draft, Greedy(), kDrafts);
    ExpectPlainTokensUpToNearTies(plain, speculative, "draft model " + draft.name);
    EXPECT_GT(Sum(speculative, &Decoded::asked), 0);
    if (draft.name == "target") {
      // Its drafts are the target's own argmaxes: all but the rare bf16
      // near-tie a one-row pass and a verify row round apart.
      EXPECT_GE(4 * Sum(speculative, &Decoded::accepted), 3 * Sum(speculative, &Decoded::asked));
    }
  }
}

TEST_F(CudaDraftTest, EagleHeadsKeepTheTargetsGreedyTokens) {
  const std::vector<Decoded> plain = Decode(nullptr, Greedy(), 0);
  const DraftCase clone{"clone", /*eagle=*/true};
  const std::vector<Decoded> eagle = Decode(&clone, Greedy(), kDrafts);
  ExpectPlainTokensUpToNearTies(plain, eagle, "EAGLE head");
  // Nearly the target, and reading its hidden states: drafts get accepted
  // only when the head has the target's features (none without them).
  EXPECT_GT(Sum(eagle, &Decoded::accepted), 0);
  const DraftCase eagle3{"eagle3", /*eagle=*/false, /*eagle3=*/true};
  ExpectPlainTokensUpToNearTies(plain, Decode(&eagle3, Greedy(), kDrafts), "EAGLE-3 head");
}

// Seeded draws are coupled: the draft draws with the target's noise at each
// position, so the target as its own draft proposes the very tokens the
// target then draws.
TEST_F(CudaDraftTest, TargetAsItsOwnDraftAcceptsSeededDraws) {
  const DraftCase self{"target"};
  const std::vector<Decoded> speculative = Decode(&self, Seeded(), kDrafts);
  for (const Decoded& run : speculative) EXPECT_EQ(run.tokens.size(), size_t{kNewTokens});
  EXPECT_GE(4 * Sum(speculative, &Decoded::accepted), 3 * Sum(speculative, &Decoded::asked));
}

// The target's graphs with each kind of draft: plain decode steps replay
// the decode graphs and verify steps the verify graphs (the EAGLE heads
// read their features from the device rows the replay wrote); every step
// fits the load-time reservation, so the graphs are still on at the end;
// the tokens are the eager runner's up to near-ties.
TEST_F(CudaDraftTest, GraphReplayWithDraftsGivesTheEagerTokens) {
  const std::vector<DraftCase> cases = {
      {"other"}, {"clone", /*eagle=*/true}, {"eagle3", false, /*eagle3=*/true}};
  for (const DraftCase& draft : cases) {
    CudaGraphCounts eager_counts, graph_counts;
    const std::vector<Decoded> eager =
        Decode(&draft, Greedy(), kDrafts,
               {.enforce_eager = true, .every_other_step = true, .counts = &eager_counts});
    const std::vector<Decoded> graphed =
        Decode(&draft, Greedy(), kDrafts, {.every_other_step = true, .counts = &graph_counts});
    ExpectPlainTokensUpToNearTies(eager, graphed, draft.name + " with graphs");
    EXPECT_EQ(eager_counts.graphs, 0) << draft.name;
    EXPECT_GT(graph_counts.graphs, 0) << draft.name;
    EXPECT_TRUE(graph_counts.live) << draft.name << ": a step moved the target's buffers";
    // Steps 3, 5, ... ask for no drafts: every sequence decodes one token;
    // steps 4, 6, ... verify up to k + 1 rows a sequence: the verify graphs.
    EXPECT_GT(graph_counts.replays, graph_counts.verify_replays) << draft.name;
    EXPECT_GT(graph_counts.verify_graphs, 0) << draft.name;
    EXPECT_GT(graph_counts.verify_replays, 0) << draft.name;
    // A draft model's passes 1..k - 1 (one sampled row a sequence) replay
    // its own decode graphs; an EAGLE head's run eagerly.
    const bool draft_model = !draft.eagle && !draft.eagle3;
    EXPECT_EQ(graph_counts.draft_graphs > 0, draft_model) << draft.name;
    EXPECT_EQ(graph_counts.draft_replays > 0, draft_model) << draft.name;
  }
}

// Issue 49's decode-step fusions (CudaDecodeFusions::All: rotary fused into
// the cache write, add + RMSNorm without the copy, GEMMs preferring no
// split-K in the graphs) keep the runner's greedy tokens up to near-ties
// (another GEMM algorithm sums in another order), over graphs and eagerly,
// bf16 and FP8 caches, and with the target as its own draft (verify steps).
TEST_F(CudaDraftTest, DecodeFusionsKeepTheGreedyTokens) {
  const CudaDecodeFusions fused = CudaDecodeFusions::All();
  const std::vector<Decoded> plain = Decode(nullptr, Greedy(), 0);
  CudaGraphCounts counts;
  ExpectPlainTokensUpToNearTies(
      plain, Decode(nullptr, Greedy(), 0, {.counts = &counts, .fusions = fused}), "fused, graphs");
  EXPECT_GT(counts.replays, 0);
  EXPECT_TRUE(counts.live);
  ExpectPlainTokensUpToNearTies(
      plain, Decode(nullptr, Greedy(), 0, {.enforce_eager = true, .fusions = fused}),
      "fused, eager");
  const DraftCase self{"target"};
  ExpectPlainTokensUpToNearTies(plain, Decode(&self, Greedy(), kDrafts, {.fusions = fused}),
                                "fused, the target as its own draft");
  // An FP8 cache: the fused kernel quantizes k and v as the plain write does.
  const std::vector<Decoded> plain_fp8 = Decode(nullptr, Greedy(), 0, {.kv_cache_dtype = "fp8"});
  ExpectPlainTokensUpToNearTies(
      plain_fp8, Decode(nullptr, Greedy(), 0, {.fusions = fused, .kv_cache_dtype = "fp8"}),
      "fused, FP8 cache");
}

TEST_F(CudaDraftTest, ProposalsMatchTheCpuWorkers) {
  for (const DraftCase& draft :
       {DraftCase{"other"}, DraftCase{"clone", true}, DraftCase{"eagle3", false, true}}) {
    const auto cpu = ProposeSteps(CreateCpuBackend(0), DType::kF32, draft);
    auto cuda_backend = CudaBackend::Create(0, DType::kBF16);
    ASSERT_TRUE(cuda_backend.ok()) << cuda_backend.status();
    const auto gpu = ProposeSteps(*std::move(cuda_backend), DType::kBF16, draft);
    ASSERT_EQ(cpu.size(), 5u) << draft.name;
    ASSERT_EQ(gpu.size(), cpu.size()) << draft.name;
    int total = 0, agreed = 0;
    for (size_t step = 0; step < cpu.size(); ++step) {
      EXPECT_EQ(cpu[step].size(), 3u) << draft.name << ", step " << step;
      EXPECT_EQ(gpu[step].size(), cpu[step].size()) << draft.name << ", step " << step;
      total += static_cast<int>(cpu[step].size());
      for (size_t j = 0; j < std::min(cpu[step].size(), gpu[step].size()); ++j) {
        if (cpu[step][j] != gpu[step][j]) break;  // The rest of the chain follows other tokens.
        ++agreed;
      }
    }
    EXPECT_GE(3 * agreed, 2 * total) << draft.name << ": " << agreed << " of " << total;
  }
}

}  // namespace
}  // namespace pagoda::worker
