// Engine recovery against a real CPU ModelRunner in this process: a worker
// group that "crashes" mid-generation and comes back empty; every request
// must resume by recomputation with exactly the tokens of an uninterrupted
// run (greedy and seeded), or fail UNAVAILABLE when the group cannot return.

#include <filesystem>
#include <functional>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "scheduler/engine/engine.h"
#include "tests/fakes/collecting_sink.h"
#include "tests/fakes/restartable_worker_group.h"
#include "tests/support/kv_event_list.h"
#include "tests/support/tiny_model.h"

namespace pagoda::scheduler {
namespace {

namespace wv1 = ::pagoda::worker::v1;
using testing::CollectingSink;

constexpr int kBlocks = 128;

class RecoveryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_dir_ = new std::string(pagoda::testing::TempPath("pagoda_recovery"));
    ASSERT_TRUE(pagoda::testing::WriteTinyModel(
                    *model_dir_,
                    "--vocab-size 128 --hidden-size 64 --intermediate-size 96 --num-layers 2"
                    " --num-heads 4 --num-kv-heads 2 --dtype f32 --seed 3 --eos-id 2")
                    .ok());
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*model_dir_);
    delete model_dir_;
  }

  // `start` false: the engine thread is started by the test, once its
  // requests are queued.
  void StartEngine(bool start = true) {
    workers_ = std::make_unique<RestartableWorkerGroup>();
    wv1::LoadModelRequest load;
    load.set_model_dir(*model_dir_);
    load.set_world_size(1);
    load.set_block_size(4);
    load.set_device("cpu");
    load.set_kv_cache_memory_bytes(64 << 20);
    load.set_max_num_batched_tokens(256);
    load.set_max_num_seqs(64);
    ASSERT_TRUE(workers_->LoadModel(load).ok());
    wv1::InitCacheRequest init;
    init.set_num_gpu_blocks(kBlocks);
    ASSERT_TRUE(workers_->InitCache(init).ok());
    EngineConfig config;
    config.scheduler.block_size = 4;
    config.scheduler.num_gpu_blocks = kBlocks;
    config.scheduler.max_num_batched_tokens = 256;
    config.scheduler.max_model_len = 256;
    config.eos_token_ids = {2};
    engine_ = std::make_unique<Engine>(config, workers_.get(), nullptr);
    if (start) engine_->Start();
  }

  // Eight requests, odd ones seeded sampling; returns their sinks.
  // `last_hook` is the last request's delta hook, set before the engine sees
  // it (the CPU worker may be many tokens in by the time this returns); all
  // the others are in by then.
  std::vector<std::shared_ptr<CollectingSink>> SubmitAll(
      std::function<void(int num_tokens)> last_hook = nullptr) {
    std::vector<std::shared_ptr<CollectingSink>> sinks;
    for (int i = 0; i < 8; ++i) {
      auto sink = std::make_shared<CollectingSink>();
      if (i == 7) sink->set_on_delta(last_hook);
      EngineRequest request;
      request.request_id = absl::StrCat("r", i);
      for (int t = 0; t < 3 + i; ++t) request.prompt_token_ids.push_back(3 + (t * 7 + i) % 120);
      request.sampling.seed = 100 + i;
      request.sampling.temperature = i % 2 == 1 ? 0.8f : 0.0f;
      request.stopping.max_tokens = 30;
      request.stopping.ignore_eos = true;
      request.sink = sink;
      sinks.push_back(sink);
      EXPECT_TRUE(engine_->AddRequest(std::move(request)).ok());
    }
    return sinks;
  }

  static std::string* model_dir_;
  std::unique_ptr<RestartableWorkerGroup> workers_;
  std::unique_ptr<Engine> engine_;
};

std::string* RecoveryTest::model_dir_ = nullptr;

TEST_F(RecoveryTest, RequestsResumeWithTheTokensOfAnUninterruptedRun) {
  StartEngine();
  std::vector<std::vector<int32_t>> expected;
  for (auto& sink : SubmitAll()) {
    ASSERT_TRUE(sink->WaitFinished());
    ASSERT_TRUE(sink->status().ok()) << sink->status();
    expected.push_back(sink->tokens());
  }
  engine_.reset();
  StartEngine();
  // Crash three times as the last request reaches 5, 12 and 20 tokens.
  std::vector<std::shared_ptr<CollectingSink>> sinks = SubmitAll([this](int count) {
    if (count == 5 || count == 12 || count == 20) workers_->Crash();
  });
  for (size_t i = 0; i < sinks.size(); ++i) {
    ASSERT_TRUE(sinks[i]->WaitFinished());
    ASSERT_TRUE(sinks[i]->status().ok()) << sinks[i]->status();
    EXPECT_EQ(sinks[i]->tokens(), expected[i]) << "request " << i;
  }
  EXPECT_EQ(workers_->restarts(), 3);
  EXPECT_TRUE(engine_->healthy());
  ASSERT_TRUE(engine_->WaitUntilIdle(absl::Seconds(5)));
  EXPECT_EQ(engine_->snapshot().free_gpu_blocks, kBlocks);  // Nothing leaked.
}

// Takes every third batch refused, as a full queue would; keeps the rest.
class RefusingKvEventSink : public KvEventSink {
 public:
  bool TryPublish(KvEventBatch& events) override {
    absl::MutexLock lock(&mu_);
    if (++calls_ % 3 == 0) return false;
    batches_.push_back(ToEvents(events));
    events.Clear();
    return true;
  }
  std::vector<std::vector<KvCacheEvent>> batches() const {
    absl::MutexLock lock(&mu_);
    return batches_;
  }

 private:
  mutable absl::Mutex mu_;
  int calls_ = 0;
  std::vector<std::vector<KvCacheEvent>> batches_;
};

TEST_F(RecoveryTest, KvEventsTrackTheCacheThroughRestartsAndRefusedBatches) {
  StartEngine(/*start=*/false);
  RefusingKvEventSink sink;
  engine_->SetKvEventSink(&sink);
  engine_->Start();
  std::vector<std::shared_ptr<CollectingSink>> sinks = SubmitAll([this](int count) {
    if (count == 5 || count == 12) workers_->Crash();
  });
  for (auto& request : sinks) ASSERT_TRUE(request->WaitFinished());
  ASSERT_TRUE(engine_->WaitUntilIdle(absl::Seconds(5)));
  // One more request after the refusals: its batch carries the resync.
  auto last = std::make_shared<CollectingSink>();
  EngineRequest request;
  request.request_id = "after";
  request.prompt_token_ids = {5, 6, 7, 8, 9, 10, 11, 12, 13};
  request.stopping.max_tokens = 2;
  request.sink = last;
  ASSERT_TRUE(engine_->AddRequest(std::move(request)).ok());
  ASSERT_TRUE(last->WaitFinished());
  // If the last batch was refused, the engine resends the resync on its
  // next wake-up (each query wakes it): a few tries at most.
  absl::flat_hash_set<uint64_t> held, expected;
  int cleared = 0;
  for (int attempt = 0; attempt < 20; ++attempt) {
    std::optional<std::vector<uint64_t>> cached = engine_->CachedBlockHashes(absl::Seconds(5));
    ASSERT_TRUE(cached.has_value());
    expected = absl::flat_hash_set<uint64_t>(cached->begin(), cached->end());
    held.clear();
    cleared = 0;
    for (const std::vector<KvCacheEvent>& batch : sink.batches()) {
      for (const KvCacheEvent& event : batch) {
        if (event.kind == KvCacheEvent::Kind::kAllBlocksCleared) {
          held.clear();
          ++cleared;
        }
        for (uint64_t hash : event.block_hashes) {
          if (event.kind == KvCacheEvent::Kind::kBlockStored) held.insert(hash);
          if (event.kind == KvCacheEvent::Kind::kBlockRemoved) held.erase(hash);
        }
      }
    }
    if (held == expected) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(held, expected);
  EXPECT_FALSE(held.empty());
  EXPECT_GE(cleared, 2);  // The restarts' clears and the resyncs.
}

TEST_F(RecoveryTest, IdleEngineRecoversWithoutARequest) {
  StartEngine();
  workers_->Crash();
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  while (workers_->restarts() == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(workers_->restarts(), 1);
  EXPECT_TRUE(engine_->healthy());
}

TEST_F(RecoveryTest, WorkersThatCannotReturnFailEveryRequestUnavailableAndSayWhy) {
  // Every request is queued before the first step: a slow submitting thread
  // could otherwise see an early request finish before the crash.
  StartEngine(/*start=*/false);
  workers_->set_can_recover(false);
  std::vector<std::shared_ptr<CollectingSink>> sinks = SubmitAll([this](int count) {
    if (count == 3) workers_->Crash();
  });
  engine_->Start();
  for (auto& sink : sinks) {
    ASSERT_TRUE(sink->WaitFinished());
    EXPECT_EQ(sink->status().code(), absl::StatusCode::kUnavailable) << sink->status();
  }
  EXPECT_FALSE(engine_->healthy());
  EXPECT_TRUE(absl::StrContains(engine_->failure_reason(), "giving up"))
      << engine_->failure_reason();
  EngineRequest late;
  late.request_id = "late";
  late.prompt_token_ids = {5, 6};
  late.sink = std::make_shared<CollectingSink>();
  const absl::Status refused = engine_->AddRequest(std::move(late));
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(refused.message(), "giving up")) << refused;
}

}  // namespace
}  // namespace pagoda::scheduler
