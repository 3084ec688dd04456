// LoRA through the whole engine and real pagoda-worker processes: twelve
// concurrent requests over the base model and three random PEFT adapters
// (tests/reference/lora_reference.py: ranks 8, 4 with rsLoRA and 13; bf16,
// f32, f16; different targets) with --max-loras 2, a KV cache small enough
// to preempt, the prefix cache on (one prompt shared by the base model and
// every adapter) and overlapped scheduling; and on two tensor-parallel
// ranks. Each request's greedy tokens must equal the float64 reference of
// its merged weights (W + scale·B·A).
// The same after a worker is killed mid-run (the restarted worker's slots
// are empty and are loaded again). An adapter the worker refuses fails its
// requests with a line naming it while the others are served; LoRA off
// refuses a request naming an adapter.

#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "scheduler/engine/engine.h"
#include "scheduler/workers/grpc_worker_group.h"
#include "tests/fakes/collecting_sink.h"
#include "tests/support/lora_test_adapters.h"
#include "tests/support/tiny_model.h"

namespace pagoda::scheduler {
namespace {

namespace fs = std::filesystem;
namespace wv1 = ::pagoda::worker::v1;
using ::pagoda::testing::PythonBinary;
using testing::CollectingSink;

constexpr int kBlockSize = 4;
constexpr int kMaxLoras = 2;
constexpr int kMaxLoraRank = 16;
constexpr int kNewTokens = 6;
constexpr int kRequests = 12;

using AdapterSpec = ::pagoda::testing::TestAdapterSpec;
const std::vector<AdapterSpec>& Adapters() { return ::pagoda::testing::TestAdapters(); }

// Request i: adapter i % 4 (0: the base model). Requests 0..3 share one
// prompt of three full blocks, so the prefix cache would serve one
// adapter's blocks to another if it did not key them by adapter.
std::vector<int32_t> Prompt(int i) {
  if (i < 4) return {3, 14, 15, 9, 2, 6, 5, 35, 8, 9, 7, 9, 3};
  std::vector<int32_t> prompt;
  for (int t = 0; t < 3 + i % 5; ++t) prompt.push_back((7 * i + 11 * t + 1) % 40);
  return prompt;
}
int AdapterOf(int i) { return i % 4; }

class LoraEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::pagoda::testing::TempPath("lora_engine_test"));
    fs::create_directories(*dir_);
    ASSERT_TRUE(::pagoda::testing::WriteTinyModel(
                    Base(),
                    "--vocab-size 40 --hidden-size 24 --intermediate-size 36 "
                    "--num-layers 2 --num-heads 4 --num-kv-heads 2 --dtype f32")
                    .ok());
    for (const AdapterSpec& spec : Adapters()) MakeAdapter(spec);
    MakeAdapter({"too_big_r20", 20, "v_proj", "f32", false, ""});
    reference_ = new std::vector<std::vector<int>>(RunReference());
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete reference_;
  }

  static std::string Base() { return *dir_ + "/base"; }
  static std::string AdapterPath(const std::string& name) { return *dir_ + "/" + name; }

  static void MakeAdapter(const AdapterSpec& spec) {
    const absl::Status written =
        ::pagoda::testing::WriteTestAdapter(Base(), AdapterPath(spec.name), spec);
    ASSERT_TRUE(written.ok()) << written;
  }

  static std::vector<std::vector<int>> RunReference() {
    nlohmann::json requests = nlohmann::json::array();
    for (int i = 0; i < kRequests; ++i) {
      nlohmann::json entry = {{"tokens", Prompt(i)}};
      if (AdapterOf(i) > 0) entry["adapter"] = AdapterPath(Adapters()[AdapterOf(i) - 1].name);
      requests.push_back(entry);
    }
    const std::string requests_path = *dir_ + "/requests.json";
    std::ofstream(requests_path) << requests.dump();
    const std::string command =
        absl::StrCat(PythonBinary(), " tests/reference/lora_reference.py greedy-batch --base ",
                     Base(), " --requests \"$(cat ", requests_path, ")\" --max-tokens ", kNewTokens,
                     " > ", *dir_, "/reference.json");
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    std::ifstream in(*dir_ + "/reference.json");
    std::vector<std::vector<int>> tokens;
    for (const auto& result : nlohmann::json::parse(in)) {
      tokens.push_back(result["tokens"].get<std::vector<int>>());
    }
    return tokens;
  }

  // Workers with `num_blocks` KV blocks and kMaxLoras slots; the adapters
  // registered (ids_[0..2], ids_[3] the one over the worker's rank).
  void StartWorkers(int num_blocks, int world_size = 1) {
    auto group = GrpcWorkerGroup::Launch(PAGODA_WORKER_BINARY, world_size, absl::Seconds(20));
    ASSERT_TRUE(group.ok()) << group.status();
    workers_ = *std::move(group);
    wv1::LoadModelRequest load;
    load.set_model_dir(Base());
    load.set_block_size(kBlockSize);
    load.set_device("cpu");
    load.set_kv_cache_memory_bytes(1 << 20);
    load.set_max_num_batched_tokens(64);
    load.set_max_num_seqs(8);
    load.set_cpu_threads(1);
    load.set_max_loras(kMaxLoras);
    load.set_max_lora_rank(kMaxLoraRank);
    load.set_max_lora_trainable_tokens(::pagoda::testing::kTestMaxTrainableTokens);
    ASSERT_TRUE(workers_->LoadModel(load).ok());
    wv1::InitCacheRequest cache;
    cache.set_num_gpu_blocks(num_blocks);
    ASSERT_TRUE(workers_->InitCache(cache).ok());
    num_blocks_ = num_blocks;
    for (const AdapterSpec& spec : Adapters()) {
      ids_.push_back(*registry_.Add({spec.name, AdapterPath(spec.name), ""}));
    }
    ids_.push_back(*registry_.Add({"too_big_r20", AdapterPath("too_big_r20"), ""}));
  }

  EngineConfig Config(int max_loras) {
    EngineConfig config;
    config.scheduler.block_size = kBlockSize;
    config.scheduler.num_gpu_blocks = num_blocks_;
    config.scheduler.max_num_seqs = 8;
    config.scheduler.max_num_batched_tokens = 64;
    config.scheduler.max_model_len = 64;
    config.scheduler.enable_chunked_prefill = true;
    config.scheduler.enable_prefix_caching = true;
    config.async_scheduling = true;
    config.lora_registry = &registry_;
    config.max_loras = max_loras;
    return config;
  }

  // Prompt `i` for registry adapter `lora_id`, acquired as a door does;
  // `run` tells the ids of several runs apart.
  std::shared_ptr<CollectingSink> Submit(Engine& engine, int i, int lora_id, int run = 0) {
    EngineRequest request;
    request.request_id = absl::StrCat("r", run, "_", i);
    request.prompt_token_ids = Prompt(i);
    request.sampling.temperature = 0.0f;
    request.stopping.max_tokens = kNewTokens;
    request.stopping.ignore_eos = true;
    if (lora_id != 0) {
      absl::StatusOr<lora::LoraEntry> entry = registry_.FindById(lora_id);
      EXPECT_TRUE(entry.ok());
      EXPECT_TRUE(registry_.Acquire(entry->spec.name).ok());
    }
    request.lora_id = lora_id;
    auto sink = std::make_shared<CollectingSink>();
    request.sink = sink;
    const absl::Status added = engine.AddRequest(std::move(request));
    EXPECT_TRUE(added.ok()) << added;
    return sink;
  }

  // Submits the twelve, waits, and checks every one against the reference.
  void RunMixedBatch(Engine& engine, std::vector<std::shared_ptr<CollectingSink>>* sinks) {
    for (int i = 0; i < kRequests; ++i) {
      sinks->push_back(Submit(engine, i, AdapterOf(i) == 0 ? 0 : ids_[AdapterOf(i) - 1]));
    }
    for (int i = 0; i < kRequests; ++i) {
      CollectingSink& sink = *(*sinks)[i];
      ASSERT_TRUE(sink.WaitFinished(absl::Seconds(60))) << "request " << i;
      ASSERT_TRUE(sink.status().ok()) << "request " << i << ": " << sink.status();
      const std::vector<int32_t> tokens = sink.tokens();
      EXPECT_EQ(std::vector<int>(tokens.begin(), tokens.end()), (*reference_)[i])
          << "request " << i << " (adapter " << AdapterOf(i) << ")";
    }
  }

  void ExpectEveryAdapterReleased() {
    for (const AdapterSpec& spec : Adapters()) {
      EXPECT_EQ(registry_.Find(spec.name)->requests, 0) << spec.name;
    }
  }

  static std::string* dir_;
  static std::vector<std::vector<int>>* reference_;
  std::unique_ptr<GrpcWorkerGroup> workers_;
  int num_blocks_ = 0;
  lora::LoraRegistry registry_;
  std::vector<int> ids_;
};

std::string* LoraEngineTest::dir_ = nullptr;
std::vector<std::vector<int>>* LoraEngineTest::reference_ = nullptr;

TEST_F(LoraEngineTest, MixedAdaptersMatchTheMergedWeightsUnderPreemption) {
  // 12 requests of up to 19 tokens (5 blocks) in 10 blocks: preemption.
  StartWorkers(10);
  Engine engine(Config(kMaxLoras), workers_.get(), nullptr);
  engine.Start();
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  RunMixedBatch(engine, &sinks);
  const EngineSnapshot snapshot = engine.snapshot();
  EXPECT_GT(snapshot.num_preemptions_total, 0);
  EXPECT_EQ(snapshot.lora.max_loras, kMaxLoras);
  ExpectEveryAdapterReleased();
  engine.Stop();
}

// Two ranks, each with its slice of every adapter (GQA 2:1 splits the KV
// heads), without overlap this time.
TEST_F(LoraEngineTest, MixedAdaptersMatchAtTensorParallel2) {
  StartWorkers(64, /*world_size=*/2);
  EngineConfig config = Config(kMaxLoras);
  config.async_scheduling = false;
  Engine engine(config, workers_.get(), nullptr);
  engine.Start();
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  RunMixedBatch(engine, &sinks);
  ExpectEveryAdapterReleased();
  engine.Stop();
}

TEST_F(LoraEngineTest, AKilledWorkerRestartsWithEmptySlotsThatLoadAgain) {
  StartWorkers(64);
  Engine engine(Config(kMaxLoras), workers_.get(), nullptr);
  engine.Start();
  // Warm: every adapter has been in a slot once.
  std::vector<std::shared_ptr<CollectingSink>> warm;
  RunMixedBatch(engine, &warm);
  // Killed as soon as the second run streams its first token.
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  const pid_t worker = workers_->worker_pids().at(0);
  for (int i = 0; i < kRequests; ++i) {
    const int lora_id = AdapterOf(i) == 0 ? 0 : ids_[AdapterOf(i) - 1];
    sinks.push_back(Submit(engine, i, lora_id, /*run=*/1));
    // Once: a later delta must not signal a pid the system may reuse.
    if (i == 0) {
      sinks[0]->set_on_delta([worker, killed = std::make_shared<std::atomic<bool>>(false)](int) {
        if (!killed->exchange(true)) kill(worker, SIGKILL);
      });
    }
  }
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(sinks[i]->WaitFinished(absl::Seconds(60))) << "request " << i;
    ASSERT_TRUE(sinks[i]->status().ok()) << sinks[i]->status();
    const std::vector<int32_t> tokens = sinks[i]->tokens();
    EXPECT_EQ(std::vector<int>(tokens.begin(), tokens.end()), (*reference_)[i]) << "request " << i;
  }
  EXPECT_GE(workers_->restarts(), 1);
  ExpectEveryAdapterReleased();
  engine.Stop();
}

TEST_F(LoraEngineTest, AnAdapterTheWorkerRefusesFailsOnlyItsRequests) {
  StartWorkers(64);
  {
    // LoRA off: a request naming an adapter is refused, and stays the
    // caller's to release.
    Engine off(Config(/*max_loras=*/0), workers_.get(), nullptr);
    EngineRequest request;
    request.request_id = "off";
    request.prompt_token_ids = {1, 2, 3};
    request.lora_id = ids_[0];
    request.sink = std::make_shared<CollectingSink>();
    EXPECT_EQ(off.AddRequest(std::move(request)).code(), absl::StatusCode::kInvalidArgument);
  }
  Engine engine(Config(kMaxLoras), workers_.get(), nullptr);
  engine.Start();
  std::shared_ptr<CollectingSink> bad = Submit(engine, 1, ids_[3]);
  std::shared_ptr<CollectingSink> good = Submit(engine, 5, ids_[0]);
  std::shared_ptr<CollectingSink> base = Submit(engine, 4, 0);
  ASSERT_TRUE(bad->WaitFinished(absl::Seconds(60)));
  EXPECT_EQ(bad->status().code(), absl::StatusCode::kInvalidArgument) << bad->status();
  EXPECT_NE(bad->status().message().find("\"too_big_r20\" could not be loaded"), std::string::npos)
      << bad->status();
  EXPECT_EQ(registry_.Find("too_big_r20")->requests, 0);
  for (const auto& [sink, i] : {std::pair{good, 5}, std::pair{base, 4}}) {
    ASSERT_TRUE(sink->WaitFinished(absl::Seconds(60)));
    ASSERT_TRUE(sink->status().ok()) << sink->status();
    const std::vector<int32_t> tokens = sink->tokens();
    EXPECT_EQ(std::vector<int>(tokens.begin(), tokens.end()), (*reference_)[i]) << i;
  }
  // The adapter unloaded once idle; a request for it afterwards is the
  // door's 404, and the engine goes on serving the rest.
  ASSERT_TRUE(engine.WaitUntilIdle(absl::Seconds(10)));
  ASSERT_TRUE(registry_.Remove(Adapters()[0].name).ok());
  engine.ForgetLoraAdapter(ids_[0]);
  std::shared_ptr<CollectingSink> after = Submit(engine, 6, ids_[AdapterOf(6) - 1]);
  ASSERT_TRUE(after->WaitFinished(absl::Seconds(60)));
  ASSERT_TRUE(after->status().ok()) << after->status();
  const std::vector<int32_t> tokens = after->tokens();
  EXPECT_EQ(std::vector<int>(tokens.begin(), tokens.end()), (*reference_)[6]);
  engine.Stop();
}

}  // namespace
}  // namespace pagoda::scheduler
