// LoRA through real pagoda-worker processes, driven by the server's gRPC
// worker group: three random PEFT adapters (tests/reference/lora_reference.py:
// ranks 8, 4 with rsLoRA and 13; bf16, f32 and f16; different targets)
// loaded into slots with the LoadLoraAdapter RPC, and steps mixing base-model
// rows with rows of every adapter. Each sequence's greedy tokens must equal,
// and their log-probabilities come within 2e-4 of, the float64 reference
// of the base weights merged with its adapter (W + scale·B·A), on one rank
// and on two tensor-parallel ranks. The reference's own base-model run of
// the adapters' prompts differs, so a worker that skipped the adapters fails.
// Then the refusals: bad slots and paths, a rank above the maximum, a
// corrupt file, a step naming an empty or unknown slot; the worker keeps
// serving after each. And a load runs beside a step that holds the worker.

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "scheduler/workers/worker_group.h"
#include "tests/support/lora_test_adapters.h"
#include "tests/support/tiny_model.h"

namespace pagoda::worker {
namespace {

namespace fs = std::filesystem;
namespace v1 = ::pagoda::worker::v1;
using ::pagoda::scheduler::WorkerGroup;
using ::pagoda::testing::PythonBinary;

constexpr absl::Duration kStartTimeout = absl::Seconds(20);
constexpr int kBlockSize = 4;
constexpr int kBlocksPerSeq = 4;
constexpr int kMaxLoraRank = 16;
constexpr int kNewTokens = 6;
constexpr double kLogprobTolerance = 2e-4;

using AdapterSpec = ::pagoda::testing::TestAdapterSpec;
const std::vector<AdapterSpec>& Adapters() { return ::pagoda::testing::TestAdapters(); }

// One sequence of the mixed batch: its prompt and slot (0: the base model).
struct Request {
  std::vector<int> prompt;
  int slot;
};

// Base, every adapter, and slot 1 twice: five sequences in every step.
const std::vector<Request>& Requests() {
  static const std::vector<Request> requests = {
      {{3, 14, 15, 9, 2}, 0}, {{6, 5, 35, 8}, 1},      {{9, 7, 9, 3, 2, 38, 4}, 2},
      {{26, 4, 33}, 3},       {{8, 3, 2, 7, 9, 5}, 1},
  };
  return requests;
}

struct Greedy {
  std::vector<int> tokens;
  std::vector<double> logprobs;
};

class LoraWorkerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::pagoda::testing::TempPath("lora_worker_test"));
    fs::create_directories(*dir_);
    // Sizes unlike the kernels' widths; GQA 2:1, so two ranks split KV heads.
    ASSERT_TRUE(::pagoda::testing::WriteTinyModel(
                    Base(),
                    "--vocab-size 40 --hidden-size 24 --intermediate-size 36 "
                    "--num-layers 2 --num-heads 4 --num-kv-heads 2 --dtype f32")
                    .ok());
    for (const AdapterSpec& spec : Adapters()) MakeAdapter(spec);
    MakeAdapter({"too_big_r20", 20, "v_proj", "f32", false, ""});
    // A corrupt copy: the safetensors header cut short.
    const std::string corrupt = *dir_ + "/corrupt";
    fs::create_directories(corrupt);
    const std::string source = *dir_ + "/all_r8_bf16";
    fs::copy_file(source + "/adapter_config.json", corrupt + "/adapter_config.json");
    std::ofstream(corrupt + "/adapter_model.safetensors", std::ios::binary) << "\x40\x00\x00";
    reference_ = new std::vector<Greedy>(RunReference());
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete reference_;
  }

  static std::string Base() { return *dir_ + "/base"; }
  static std::string AdapterPath(int slot) { return *dir_ + "/" + Adapters()[slot - 1].name; }

  static void MakeAdapter(const AdapterSpec& spec) {
    const absl::Status written =
        ::pagoda::testing::WriteTestAdapter(Base(), *dir_ + "/" + spec.name, spec);
    ASSERT_TRUE(written.ok()) << written;
  }

  // The reference's greedy tokens for every request, then for the adapter
  // requests' prompts on the base model (the runs a worker that skipped the
  // adapters would match).
  static std::vector<Greedy> RunReference() {
    nlohmann::json requests = nlohmann::json::array();
    for (const Request& request : Requests()) {
      nlohmann::json entry = {{"tokens", request.prompt}};
      if (request.slot > 0) entry["adapter"] = AdapterPath(request.slot);
      requests.push_back(entry);
    }
    for (const Request& request : Requests()) {
      if (request.slot > 0) requests.push_back({{"tokens", request.prompt}});
    }
    const std::string requests_path = *dir_ + "/requests.json";
    std::ofstream(requests_path) << requests.dump();
    const std::string command =
        absl::StrCat(PythonBinary(), " tests/reference/lora_reference.py greedy-batch --base ",
                     Base(), " --requests \"$(cat ", requests_path, ")\" --max-tokens ", kNewTokens,
                     " > ", *dir_, "/reference.json");
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    std::ifstream in(*dir_ + "/reference.json");
    const nlohmann::json results = nlohmann::json::parse(in);
    std::vector<Greedy> greedy;
    for (const auto& result : results) {
      greedy.push_back({result["tokens"].get<std::vector<int>>(),
                        result["logprobs"].get<std::vector<double>>()});
    }
    return greedy;
  }

  static v1::LoadModelRequest LoadRequest(int max_loras) {
    v1::LoadModelRequest request;
    request.set_model_dir(Base());
    request.set_block_size(kBlockSize);
    request.set_device("cpu");
    request.set_kv_cache_memory_bytes(1 << 20);
    request.set_max_num_batched_tokens(64);
    request.set_max_num_seqs(8);
    request.set_cpu_threads(1);
    request.set_max_loras(max_loras);
    request.set_max_lora_rank(kMaxLoraRank);
    request.set_max_lora_trainable_tokens(::pagoda::testing::kTestMaxTrainableTokens);
    return request;
  }

  // A group of `world` ranks with the model loaded, a cache, and the three
  // adapters in slots 1..3.
  static std::unique_ptr<WorkerGroup> ReadyGroup(int world) {
    auto group = scheduler::LaunchLocalWorkers(PAGODA_WORKER_BINARY, world, kStartTimeout);
    EXPECT_TRUE(group.ok()) << group.status();
    if (!group.ok()) return nullptr;
    auto loaded = (*group)->LoadModel(LoadRequest(3));
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    v1::InitCacheRequest cache;
    cache.set_num_gpu_blocks(32);
    EXPECT_TRUE((*group)->InitCache(cache).ok());
    for (int slot = 1; slot <= 3; ++slot) {
      auto response = (*group)->LoadLoraAdapter(LoadAdapter(slot, AdapterPath(slot)));
      EXPECT_TRUE(response.ok()) << response.status();
      if (response.ok()) {
        EXPECT_EQ(response->rank(), Adapters()[slot - 1].rank);
      }
    }
    return *std::move(group);
  }

  static v1::LoadLoraAdapterRequest LoadAdapter(int slot, const std::string& path) {
    v1::LoadLoraAdapterRequest request;
    request.set_slot(slot);
    request.set_path(path);
    return request;
  }

  // Sequence `s` of a step: its inputs from `start`, greedy, in its slot.
  static void AddSequence(v1::StepPlan& plan, int s, const std::vector<int>& tokens, int start,
                          int slot) {
    v1::SequenceStep* step = plan.add_sequences();
    step->set_seq_id(s + 1);
    for (int token : tokens) step->add_token_ids(token);
    step->set_start_position(start);
    for (int b = 0; b < kBlocksPerSeq; ++b) step->add_block_table(s * kBlocksPerSeq + b);
    step->set_do_sample(true);
    step->set_lora_slot(slot);
  }

  // Every request prefilled in one step, then decoded together: each
  // request's tokens and logprobs.
  static std::vector<Greedy> RunMixedBatch(WorkerGroup& group) {
    const std::vector<Request>& requests = Requests();
    std::vector<Greedy> out(requests.size());
    std::vector<std::vector<int>> inputs;
    std::vector<int> starts(requests.size(), 0);
    for (const Request& request : requests) inputs.push_back(request.prompt);
    for (int step = 0; step < kNewTokens; ++step) {
      v1::StepPlan plan;
      plan.set_step_id(step);
      for (size_t s = 0; s < requests.size(); ++s) {
        AddSequence(plan, static_cast<int>(s), inputs[s], starts[s], requests[s].slot);
      }
      auto result = group.ExecuteStep(plan);
      EXPECT_TRUE(result.ok()) << result.status();
      if (!result.ok() || result->tokens_size() != static_cast<int>(requests.size())) return out;
      for (size_t s = 0; s < requests.size(); ++s) {
        const v1::SampledToken& token = result->tokens(static_cast<int>(s));
        out[s].tokens.push_back(token.token_id());
        out[s].logprobs.push_back(token.logprob());
        starts[s] += static_cast<int>(inputs[s].size());
        inputs[s] = {token.token_id()};
      }
    }
    return out;
  }

  static void ExpectMatchesReference(const std::vector<Greedy>& got, const std::string& what) {
    for (size_t s = 0; s < Requests().size(); ++s) {
      const Greedy& expected = (*reference_)[s];
      EXPECT_EQ(got[s].tokens, expected.tokens) << what << ", sequence " << s;
      ASSERT_EQ(got[s].logprobs.size(), expected.logprobs.size()) << what;
      for (size_t t = 0; t < expected.logprobs.size(); ++t) {
        EXPECT_NEAR(got[s].logprobs[t], expected.logprobs[t], kLogprobTolerance)
            << what << ", sequence " << s << ", token " << t;
      }
    }
  }

  static std::string* dir_;
  static std::vector<Greedy>* reference_;
};
std::string* LoraWorkerTest::dir_ = nullptr;
std::vector<Greedy>* LoraWorkerTest::reference_ = nullptr;

// The reference itself: every adapter moves its sequences' outputs well
// past the tolerance, so a worker that left them out could not pass.
TEST_F(LoraWorkerTest, EveryAdapterChangesItsSequencesUnderTheReference) {
  size_t base_run = Requests().size();
  for (const Request& request : Requests()) {
    if (request.slot == 0) continue;
    const Greedy& merged = (*reference_)[&request - Requests().data()];
    const Greedy& base = (*reference_)[base_run++];
    double moved = 0;
    for (size_t t = 0; t < base.logprobs.size(); ++t) {
      moved = std::max(moved, std::abs(base.logprobs[t] - merged.logprobs[t]));
    }
    EXPECT_TRUE(merged.tokens != base.tokens || moved > 50 * kLogprobTolerance)
        << "slot " << request.slot << " leaves its prompt's output alone";
  }
}

TEST_F(LoraWorkerTest, MixedBatchOfBaseAndThreeAdaptersMatchesMergedWeightsOnOneAndTwoRanks) {
  for (int world : {1, 2}) {
    std::unique_ptr<WorkerGroup> group = ReadyGroup(world);
    ASSERT_NE(group, nullptr);
    ExpectMatchesReference(RunMixedBatch(*group), absl::StrCat(world, " rank(s)"));
    EXPECT_TRUE(group->Healthy());
    group->Shutdown();
  }
}

// Prompt logprobs of an adapter that updates embed_tokens and lm_head (slot
// 3) beside a base-model prompt, on one and two ranks (the head split over
// them; its update added on rank 0): each row's log-probability is the
// merged weights' (tests/reference/lora_reference.py prompt-logprobs).
TEST_F(LoraWorkerTest, PromptLogprobsFollowTheMergedEmbeddingAndHead) {
  ASSERT_EQ(Adapters()[2].targets.find("lm_head") != std::string::npos, true);
  const std::vector<int> prompt = {26, 4, 33, 9, 12}, next = {4, 33, 9, 12, 7};
  std::vector<std::vector<double>> expected;
  for (const std::string& adapter : {AdapterPath(3), std::string()}) {
    const std::string out = *dir_ + "/prompt_logprobs.json";
    const std::string command = absl::StrCat(
        PythonBinary(), " tests/reference/lora_reference.py prompt-logprobs --base ", Base(),
        adapter.empty() ? "" : absl::StrCat(" --adapter ", adapter), " --tokens ",
        absl::StrJoin(prompt, ","), " --next ", absl::StrJoin(next, ","), " > ", out);
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    std::ifstream in(out);
    expected.push_back(nlohmann::json::parse(in).get<std::vector<double>>());
  }
  for (int world : {1, 2}) {
    std::unique_ptr<WorkerGroup> group = ReadyGroup(world);
    ASSERT_NE(group, nullptr);
    v1::StepPlan plan;
    for (int slot : {3, 0}) {
      AddSequence(plan, plan.sequences_size(), prompt, 0, slot);
      v1::SequenceStep* step = plan.mutable_sequences(plan.sequences_size() - 1);
      step->set_do_sample(false);
      for (int id : next) step->add_prompt_logprob_token_ids(id);
      step->set_num_prompt_top_logprobs(1);
    }
    auto result = group->ExecuteStep(plan);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->prompt_logprobs_size(), 2);
    for (int s = 0; s < 2; ++s) {
      const auto& got = result->prompt_logprobs(s);
      ASSERT_EQ(got.tokens_size(), static_cast<int>(next.size()));
      for (int i = 0; i < got.tokens_size(); ++i) {
        EXPECT_EQ(got.tokens(i).token_id(), next[i]);
        EXPECT_NEAR(got.tokens(i).logprob(), expected[s][i], kLogprobTolerance)
            << world << " rank(s), sequence " << s << ", row " << i;
      }
    }
    group->Shutdown();
  }
}

// A load does not queue behind the steps: one sent while a step holds the
// worker, waiting for the token mask that follows its plan, completes
// before that mask is sent (queued behind the step, the two would wait on
// each other until the step's deadline). The next step runs the new adapter.
TEST_F(LoraWorkerTest, LoadRunsBesideAStepWaitingForItsMasks) {
  std::unique_ptr<WorkerGroup> group = ReadyGroup(1);
  ASSERT_NE(group, nullptr);
  v1::StepPlan plan;
  plan.set_step_id(1);
  AddSequence(plan, 0, {1, 2, 3}, 0, 1);
  plan.mutable_sequences(0)->set_token_mask_follows(true);
  absl::Status loaded = absl::UnknownError("the mask source never ran");
  auto result = group->ExecuteStep(plan, [&] {
    // Slot 2, which the step does not use, gets slot 3's adapter.
    loaded = group->LoadLoraAdapter(LoadAdapter(2, AdapterPath(3))).status();
    v1::StepMasks masks;
    masks.set_step_id(1);
    v1::RowTokenMask* row = masks.add_rows();
    row->set_seq_id(1);
    row->set_token_mask(std::string("\xff\xff\xff\xff\xff\x00\x00\x00", 8));  // 40 tokens.
    return masks;
  });
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(loaded.ok()) << loaded;
  const Request& request = Requests()[3];  // Slot 3's adapter, now also in slot 2.
  v1::StepPlan next;
  next.set_step_id(2);
  AddSequence(next, 1, request.prompt, 0, 2);
  auto first = group->ExecuteStep(next);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->tokens(0).token_id(), (*reference_)[3].tokens[0]);
}

TEST_F(LoraWorkerTest, BadLoadsAndStepsAreRefusedAndTheWorkerKeepsServing) {
  std::unique_ptr<WorkerGroup> group = ReadyGroup(1);
  ASSERT_NE(group, nullptr);
  auto code = [&](int slot, const std::string& path) {
    return group->LoadLoraAdapter(LoadAdapter(slot, path)).status().code();
  };
  EXPECT_EQ(code(0, AdapterPath(1)), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(4, AdapterPath(1)), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(1, "relative/adapter"), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(1, std::string(AdapterPath(1)) + std::string(1, '\0') + "x"),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(1, std::string(5000, '/')), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(1, *dir_ + "/missing"), absl::StatusCode::kNotFound);
  EXPECT_EQ(code(1, *dir_ + "/too_big_r20"), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(2, *dir_ + "/corrupt"), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(group->Healthy());

  // Failed loads left slots 1 and 2 empty; 3 still holds its adapter.
  auto step_in = [&](int64_t id, int slot) {
    v1::StepPlan plan;
    plan.set_step_id(id);
    AddSequence(plan, 0, {1, 2, 3}, 0, slot);
    return group->ExecuteStep(plan);
  };
  EXPECT_EQ(step_in(1, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(step_in(2, 9).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(step_in(3, -1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(step_in(4, 3).ok());
  v1::UnloadLoraAdapterRequest unload;
  unload.set_slot(3);
  EXPECT_TRUE(group->UnloadLoraAdapter(unload).ok());
  EXPECT_EQ(step_in(5, 3).status().code(), absl::StatusCode::kInvalidArgument);
  unload.set_slot(7);
  EXPECT_EQ(group->UnloadLoraAdapter(unload).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(step_in(6, 0).ok());
  EXPECT_TRUE(group->Healthy());

  // A model loaded without slots refuses adapters; a bound on the slots.
  EXPECT_EQ(group->LoadModel(LoadRequest(2000)).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(group->LoadModel(LoadRequest(0)).ok());
  EXPECT_EQ(code(1, AdapterPath(1)), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(group->Healthy());
}

}  // namespace
}  // namespace pagoda::worker
