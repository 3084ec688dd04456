// A draft model sharded over a two-rank group (draft_tensor_parallel_size
// equal to the world size, vLLM's default): two CPU runners in one process
// form a real group (TCP collectives through a rendezvous store), each loads
// its shard of the draft beside its shard of the target, and both run every
// draft pass; rank 0 picks each draft and the other rank receives it before
// the next pass feeds it. With the target as its own draft, split the same
// way, the draft's sums are the target's: every draft is accepted, greedy
// or drawn (a draft is drawn with its target row's noise), and the tokens
// equal plain decoding's, greedy and seeded, with penalties too. A draft whole on
// rank 0 (size 1) leaves rank 1 without a draft cache; the worker refuses
// sizes that are neither.

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "wire/rendezvous_store_server.h"
#include "wire/worker_secret.h"
#include "worker/cpu/cpu_model_runner.h"
#include "worker/model_runner.h"

namespace pagoda::worker {
namespace {

using ::pagoda::wire::RendezvousStoreServer;
using pagoda::worker::v1::LoadModelRequest;
using pagoda::worker::v1::LoadModelResponse;
using pagoda::worker::v1::SampledToken;
using pagoda::worker::v1::SamplingOptions;
using pagoda::worker::v1::SequenceStep;
using pagoda::worker::v1::StepPlan;
using pagoda::worker::v1::StepResult;

constexpr int kBlockSize = 4;
constexpr int kBlocksPerSeq = 6;  // 24 slots: the prompt, 12 new tokens, drafts past them.
constexpr int kSeqs = 2;
constexpr int kVocab = 40;
constexpr int kNewTokens = 12;
constexpr int kDrafts = 3;
const std::vector<int> kPrompt = {3, 9, 4, 17, 22};

std::string TestEnv(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

struct Generated {
  std::vector<int> tokens;
  int proposed = 0;
  int accepted = 0;
};

class DraftTensorParallelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/pagoda_draft_tp_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    const std::string command = absl::StrCat(
        TestEnv("PAGODA_PYTHON3", "/usr/bin/python3"), " ", TestEnv("PAGODA_SOURCE_DIR", "."),
        "/scripts/make_tiny_model.py --out ", dir_, " --vocab-size ", kVocab,
        " --hidden-size 32 --intermediate-size 48 --num-layers 2 --num-heads 4 --num-kv-heads 2"
        " --max-position-embeddings 64 --seed 23 > /dev/null");
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    RendezvousStoreServer::Options options;
    options.secret = GenerateWorkerSecret().value();
    secret_ = options.secret;
    auto store = RendezvousStoreServer::Start(options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Both ranks of a fresh group (the join needs both at once), with the
  // target as its own draft at `draft_size` (-1: no draft), each with its
  // cache; `responses` gets each rank's load answer. Empty on a failed load,
  // whose statuses land in `loaded`.
  std::vector<std::unique_ptr<ModelRunner>> LoadGroup(const std::string& prefix, int draft_size,
                                                      std::vector<LoadModelResponse>* responses,
                                                      std::vector<absl::Status>* loaded) {
    std::vector<std::unique_ptr<ModelRunner>> ranks(2);
    responses->assign(2, LoadModelResponse());
    loaded->assign(2, absl::OkStatus());
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      ranks[r] = CreateCpuModelRunner();
      threads.emplace_back([&, r] {
        LoadModelRequest load;
        load.set_model_dir(dir_);
        load.set_block_size(kBlockSize);
        load.set_device("cpu");
        load.set_cpu_threads(1);
        load.set_kv_cache_memory_bytes(int64_t{1} << 20);
        load.set_rank(r);
        load.set_world_size(2);
        load.set_rendezvous_address(absl::StrCat("127.0.0.1:", store_->port()));
        load.set_rendezvous_secret(secret_);
        load.set_rendezvous_prefix(prefix);
        load.set_collective_timeout_ms(20000);
        if (draft_size >= 0) {
          load.set_draft_model_dir(dir_);
          load.set_draft_tensor_parallel_size(draft_size);
        }
        absl::StatusOr<LoadModelResponse> response = ranks[r]->LoadModel(load);
        (*loaded)[r] = response.status();
        if (!response.ok()) return;
        (*responses)[r] = *response;
        v1::InitCacheRequest init;
        init.set_num_gpu_blocks(kSeqs * kBlocksPerSeq);
        (*loaded)[r] = ranks[r]->InitCache(init);
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (const absl::Status& status : *loaded) {
      if (!status.ok()) return {};
    }
    return ranks;
  }

  // `plan` on both ranks at once; rank 0's result.
  static absl::StatusOr<StepResult> RunOnBoth(std::vector<std::unique_ptr<ModelRunner>>& ranks,
                                              const StepPlan& plan) {
    absl::StatusOr<StepResult> rank1 = absl::UnknownError("not run");
    std::thread other([&] { rank1 = ranks[1]->ExecuteStep(plan); });
    absl::StatusOr<StepResult> rank0 = ranks[0]->ExecuteStep(plan);
    other.join();
    EXPECT_TRUE(rank1.ok()) << rank1.status();
    return rank0;
  }

  // Sequence s's step after `output`: its prompt, or its last token asking
  // for `proposals` drafts.
  static SequenceStep StepFor(const SamplingOptions& base, int s, const std::vector<int>& output,
                              int proposals) {
    SequenceStep step;
    step.set_seq_id(s + 3);
    if (output.empty()) {
      for (int t : kPrompt) step.add_token_ids((t + 7 * s) % kVocab);
    } else {
      step.add_token_ids(output.back());
      step.set_start_position(static_cast<int>(kPrompt.size() + output.size()) - 1);
      step.set_num_draft_proposals(proposals);
    }
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

  // kNewTokens tokens for each sequence; every decode step asks the draft
  // for up to kDrafts proposals when `propose` (never past kNewTokens).
  static std::vector<Generated> Generate(std::vector<std::unique_ptr<ModelRunner>>& ranks,
                                         const SamplingOptions& base, bool propose) {
    std::vector<Generated> outs(kSeqs);
    for (int step_index = 0; step_index < 2 * kNewTokens; ++step_index) {
      StepPlan plan;
      plan.set_step_id(step_index);
      std::vector<int> members;
      for (int s = 0; s < kSeqs; ++s) {
        const int left = kNewTokens - static_cast<int>(outs[s].tokens.size());
        if (left <= 0) continue;
        const int proposals = propose ? std::min(kDrafts, left - 1) : 0;
        *plan.add_sequences() = StepFor(base, s, outs[s].tokens, proposals);
        members.push_back(s);
      }
      if (members.empty()) break;
      absl::StatusOr<StepResult> result = RunOnBoth(ranks, plan);
      EXPECT_TRUE(result.ok()) << result.status();
      if (!result.ok() || result->tokens_size() != static_cast<int>(members.size())) return outs;
      for (size_t i = 0; i < members.size(); ++i) {
        const SampledToken& token = result->tokens(static_cast<int>(i));
        Generated& out = outs[members[i]];
        const SequenceStep& step = plan.sequences(static_cast<int>(i));
        out.proposed += step.num_draft_proposals();
        out.accepted += token.accepted_draft_ids_size();
        for (int id : token.accepted_draft_ids()) out.tokens.push_back(id);
        out.tokens.push_back(token.token_id());
      }
    }
    return outs;
  }

  std::string dir_;
  std::string secret_;
  std::unique_ptr<RendezvousStoreServer> store_;
};

TEST_F(DraftTensorParallelTest, ShardedDraftProposesOnEveryRankAndKeepsPlainTokens) {
  SamplingOptions greedy;
  SamplingOptions seeded;
  seeded.set_temperature(0.9f);
  seeded.set_seed(11);
  SamplingOptions penalized = seeded;  // Which the draft does not apply.
  penalized.set_frequency_penalty(0.5f);
  const std::vector<SamplingOptions> kinds = {greedy, seeded, penalized};
  std::vector<LoadModelResponse> responses;
  std::vector<absl::Status> loaded;
  std::vector<std::vector<Generated>> plain;
  {
    auto ranks = LoadGroup("plain", /*draft_size=*/-1, &responses, &loaded);
    ASSERT_FALSE(ranks.empty()) << loaded[0] << " / " << loaded[1];
    for (const SamplingOptions& base : kinds) plain.push_back(Generate(ranks, base, false));
  }
  const int64_t target_bytes = responses[1].bytes_per_block();
  auto ranks = LoadGroup("sharded", /*draft_size=*/2, &responses, &loaded);
  ASSERT_FALSE(ranks.empty()) << loaded[0] << " / " << loaded[1];
  // Each rank holds its shard of the draft's cache beside the target's.
  EXPECT_EQ(responses[0].bytes_per_block(), 2 * target_bytes);
  EXPECT_EQ(responses[1].bytes_per_block(), 2 * target_bytes);
  for (size_t b = 0; b < kinds.size(); ++b) {
    const std::vector<Generated> speculative = Generate(ranks, kinds[b], /*propose=*/true);
    for (int s = 0; s < kSeqs; ++s) {
      SCOPED_TRACE(absl::StrCat(kinds[b].DebugString(), " sequence ", s));
      ASSERT_EQ(plain[b][s].tokens.size(), kNewTokens);
      EXPECT_EQ(speculative[s].tokens, plain[b][s].tokens);
      EXPECT_GT(speculative[s].proposed, 0);
      // The draft's draws are the target's own: all right.
      if (&kinds[b] != &kinds.back()) EXPECT_EQ(speculative[s].accepted, speculative[s].proposed);
    }
  }
}

TEST_F(DraftTensorParallelTest, DraftWholeOnRankZeroOrRefused) {
  std::vector<LoadModelResponse> responses;
  std::vector<absl::Status> loaded;
  {
    auto plain = LoadGroup("plain", /*draft_size=*/-1, &responses, &loaded);
    ASSERT_FALSE(plain.empty()) << loaded[0] << " / " << loaded[1];
  }
  const int64_t target_bytes = responses[1].bytes_per_block();
  {
    auto ranks = LoadGroup("whole", /*draft_size=*/1, &responses, &loaded);
    ASSERT_FALSE(ranks.empty()) << loaded[0] << " / " << loaded[1];
    // Rank 0 holds the whole draft's cache (both KV heads), rank 1 none.
    EXPECT_EQ(responses[0].bytes_per_block(), 3 * target_bytes);
    EXPECT_EQ(responses[1].bytes_per_block(), target_bytes);
  }
  // Each rank refuses alone, before joining the group.
  auto ranks = LoadGroup("three", /*draft_size=*/3, &responses, &loaded);
  EXPECT_TRUE(ranks.empty());
  for (const absl::Status& status : loaded) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(),
                                  "draft_tensor_parallel_size 3 must be 1 or the world size 2"))
        << status;
  }
}

}  // namespace
}  // namespace pagoda::worker
