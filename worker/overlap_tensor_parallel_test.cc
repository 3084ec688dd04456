// Overlapped scheduling under tensor parallelism: two CPU runners in one
// process form a real two-rank group (TCP collectives through a rendezvous
// store). Rank 0 samples; rank 1 must receive each placeholder's token
// before its forward pass (ShareLastSampledTokens), or its half of every
// all-reduce is computed from the wrong input. Sequences decoded with
// placeholders give exactly the tokens and logprobs of the same group
// decoding plainly.

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

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
using pagoda::worker::v1::SamplingOptions;
using pagoda::worker::v1::SequenceStep;
using pagoda::worker::v1::StepPlan;
using pagoda::worker::v1::StepResult;

constexpr int kBlockSize = 4;
constexpr int kBlocksPerSeq = 4;
constexpr int kSeqs = 2;
constexpr int kVocab = 40;
constexpr int kNewTokens = 9;
const std::vector<int> kPrompt = {3, 9, 4, 17, 22};

std::string Env(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

struct Decoded {
  std::vector<int> tokens;
  std::vector<float> logprobs;
};

class OverlapTensorParallelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/pagoda_overlap_tp_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    const std::string command = absl::StrCat(
        Env("PAGODA_PYTHON3", "/usr/bin/python3"), " ", Env("PAGODA_SOURCE_DIR", "."),
        "/scripts/make_tiny_model.py --out ", dir_, " --vocab-size ", kVocab,
        " --hidden-size 32 --intermediate-size 48 --num-layers 2 --num-heads 4 --num-kv-heads 2"
        " --max-position-embeddings 64 --seed 21 > /dev/null");
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    RendezvousStoreServer::Options options;
    options.secret = GenerateWorkerSecret().value();
    secret_ = options.secret;
    auto store = RendezvousStoreServer::Start(options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Both ranks of a fresh group, loaded (the join needs both at once) and
  // with their caches.
  std::vector<std::unique_ptr<ModelRunner>> LoadGroup(const std::string& prefix) {
    std::vector<std::unique_ptr<ModelRunner>> ranks(2);
    std::vector<absl::Status> loaded(2);
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
        loaded[r] = ranks[r]->LoadModel(load).status();
        if (!loaded[r].ok()) return;
        v1::InitCacheRequest init;
        init.set_num_gpu_blocks(kSeqs * kBlocksPerSeq);
        loaded[r] = ranks[r]->InitCache(init);
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (const absl::Status& status : loaded) EXPECT_TRUE(status.ok()) << status;
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
    if (rank1.ok()) EXPECT_EQ(rank1->tokens_size(), 0);  // Only rank 0 samples.
    return rank0;
  }

  static SequenceStep StepFor(const SamplingOptions& base, int s, const std::vector<int>& known,
                              bool placeholder) {
    SequenceStep step;
    step.set_seq_id(s + 7);
    const int output_len = static_cast<int>(known.size()) + (placeholder ? 1 : 0);
    if (output_len == 0) {
      for (int t : kPrompt) step.add_token_ids((t + 5 * s) % kVocab);
    } else {
      step.add_token_ids(placeholder ? 0 : known.back());
      step.set_start_position(static_cast<int>(kPrompt.size()) + output_len - 1);
      step.set_input_from_last_sample(placeholder);
    }
    for (int b = 0; b < kBlocksPerSeq; ++b) step.add_block_table(s * kBlocksPerSeq + b);
    step.set_do_sample(true);
    step.set_sample_index(output_len);
    *step.mutable_sampling() = base;
    std::map<int, int> counts;
    for (int t : known) ++counts[t];
    for (const auto& [id, count] : counts) {
      step.mutable_sampling()->add_output_token_ids(id);
      step.mutable_sampling()->add_output_token_counts(count);
    }
    return step;
  }

  // kNewTokens for each sequence on a fresh group, every step after the
  // prefill planned before the previous step's tokens are read when
  // `overlap`.
  std::vector<Decoded> Decode(const SamplingOptions& base, bool overlap,
                              const std::string& prefix) {
    auto ranks = LoadGroup(prefix);
    std::vector<Decoded> outs(kSeqs);
    StepResult last;  // Sampled, not yet read.
    for (int step_index = 0; step_index < kNewTokens; ++step_index) {
      const bool in_flight = step_index > 0;
      if (in_flight && !overlap) {
        for (int s = 0; s < kSeqs; ++s) {
          outs[s].tokens.push_back(last.tokens(s).token_id());
          outs[s].logprobs.push_back(last.tokens(s).logprob());
        }
      }
      StepPlan plan;
      plan.set_step_id(step_index);
      for (int s = 0; s < kSeqs; ++s) {
        *plan.add_sequences() = StepFor(base, s, outs[s].tokens, in_flight && overlap);
      }
      if (in_flight && overlap) {
        for (int s = 0; s < kSeqs; ++s) {
          outs[s].tokens.push_back(last.tokens(s).token_id());
          outs[s].logprobs.push_back(last.tokens(s).logprob());
        }
      }
      absl::StatusOr<StepResult> result = RunOnBoth(ranks, plan);
      EXPECT_TRUE(result.ok()) << result.status();
      if (!result.ok()) return outs;
      EXPECT_EQ(result->tokens_size(), kSeqs);
      if (result->tokens_size() != kSeqs) return outs;
      last = *std::move(result);
    }
    for (int s = 0; s < kSeqs; ++s) {
      outs[s].tokens.push_back(last.tokens(s).token_id());
      outs[s].logprobs.push_back(last.tokens(s).logprob());
    }
    return outs;
  }

  std::string dir_;
  std::string secret_;
  std::unique_ptr<RendezvousStoreServer> store_;
};

TEST_F(OverlapTensorParallelTest, PlaceholdersReachEveryRank) {
  SamplingOptions sampled;
  sampled.set_temperature(0.8f);
  sampled.set_seed(5);
  sampled.set_frequency_penalty(-1.5f);
  const std::vector<Decoded> plain = Decode(sampled, /*overlap=*/false, "plain");
  const std::vector<Decoded> overlapped = Decode(sampled, /*overlap=*/true, "overlap");
  for (int s = 0; s < kSeqs; ++s) {
    ASSERT_EQ(plain[s].tokens.size(), kNewTokens);
    EXPECT_EQ(overlapped[s].tokens, plain[s].tokens) << "sequence " << s;
    ASSERT_EQ(overlapped[s].logprobs.size(), plain[s].logprobs.size());
    for (int i = 0; i < kNewTokens; ++i) {
      EXPECT_NEAR(overlapped[s].logprobs[i], plain[s].logprobs[i], 1e-5) << s << ", " << i;
    }
  }
  EXPECT_NE(plain[0].tokens, plain[1].tokens);
}

}  // namespace
}  // namespace pagoda::worker
