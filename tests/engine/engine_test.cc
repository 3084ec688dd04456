// The engine loop against a real CPU ModelRunner in this process (no RPC):
// greedy tokens vs the NumPy reference, batching invariance, abort, worker
// failure, unschedulable prompts, admission errors and drain.
#include "scheduler/engine/engine.h"


#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/fakes/collecting_sink.h"
#include "tests/fakes/in_process_worker_group.h"
#include "tests/support/tiny_model.h"
#include "worker/cpu/cpu_model_runner.h"

namespace pagoda::scheduler {
namespace {

using testing::CollectingSink;

constexpr int kVocab = 128;
constexpr char kModelFlags[] =
    "--vocab-size 128 --hidden-size 64 --intermediate-size 96 --num-layers 2 --num-heads 4"
    " --num-kv-heads 2 --dtype f32 --seed 3 --eos-id 2";
constexpr int kBlockSize = 4;  // Small, so short prompts span several blocks.

// Runs `command` and returns its stdout; fails the test on a non-zero exit.
std::string RunShell(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  EXPECT_EQ(pclose(pipe), 0) << command;
  return out;
}

// Passes every call to `inner`, running a hook on the engine thread at the
// start of each step (to act while the engine is inside a step).
class HookedWorkers : public WorkerGroup {
 public:
  explicit HookedWorkers(WorkerGroup* inner) : inner_(inner) {}
  void set_before_step(std::function<void()> hook) {
    absl::MutexLock lock(&mu_);
    before_step_ = std::move(hook);
  }
  absl::StatusOr<pagoda::worker::v1::LoadModelResponse> LoadModel(
      const pagoda::worker::v1::LoadModelRequest& request) override {
    return inner_->LoadModel(request);
  }
  absl::Status InitCache(const pagoda::worker::v1::InitCacheRequest& request) override {
    return inner_->InitCache(request);
  }
  absl::StatusOr<pagoda::worker::v1::StepResult> ExecuteStep(
      const pagoda::worker::v1::StepPlan& plan, const StepMaskSource& masks) override {
    std::function<void()> hook;
    {
      absl::MutexLock lock(&mu_);
      hook = before_step_;
    }
    if (hook) hook();
    return inner_->ExecuteStep(plan, masks);
  }
  bool Healthy() const override { return inner_->Healthy(); }
  int world_size() const override { return inner_->world_size(); }
  void Shutdown() override { inner_->Shutdown(); }

 private:
  WorkerGroup* const inner_;
  absl::Mutex mu_;
  std::function<void()> before_step_ ABSL_GUARDED_BY(mu_);
};

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_dir_ = new std::string(pagoda::testing::TempPath("pagoda_engine"));
    ASSERT_TRUE(pagoda::testing::WriteTinyModel(*model_dir_, kModelFlags).ok());
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*model_dir_);
    delete model_dir_;
  }

  // Builds workers with `num_blocks` KV blocks and an engine over them.
  void StartEngine(int num_blocks, int max_queued_requests = 1024, bool start = true,
                   int max_num_seqs = 64, bool async_scheduling = true) {
    workers_ = std::make_unique<InProcessWorkerGroup>(pagoda::worker::CreateCpuModelRunner());
    hooked_ = std::make_unique<HookedWorkers>(workers_.get());
    pagoda::worker::v1::LoadModelRequest load;
    load.set_model_dir(*model_dir_);
    load.set_world_size(1);
    load.set_block_size(kBlockSize);
    load.set_device("cpu");
    load.set_kv_cache_memory_bytes(64 << 20);
    load.set_max_num_batched_tokens(256);
    load.set_max_num_seqs(64);
    ASSERT_TRUE(workers_->LoadModel(load).ok());
    pagoda::worker::v1::InitCacheRequest init;
    init.set_num_gpu_blocks(num_blocks);
    ASSERT_TRUE(workers_->InitCache(init).ok());
    EngineConfig config;
    config.scheduler.block_size = kBlockSize;
    config.scheduler.num_gpu_blocks = num_blocks;
    config.scheduler.max_num_seqs = max_num_seqs;
    config.scheduler.max_num_batched_tokens = 256;
    config.scheduler.max_model_len = 256;
    config.eos_token_ids = {2};
    config.max_queued_requests = max_queued_requests;
    config.async_scheduling = async_scheduling;
    engine_ = std::make_unique<Engine>(config, hooked_.get(), observer_);
    if (start) engine_->Start();
  }

  // `on_delta` is installed before the engine can see the request: a fast
  // worker may finish a short request before Submit returns.
  std::shared_ptr<CollectingSink> Submit(const std::string& id, std::vector<int32_t> prompt,
                                         int max_tokens, absl::Status* admission = nullptr,
                                         std::function<void()> on_delta = nullptr) {
    auto sink = std::make_shared<CollectingSink>();
    if (on_delta) sink->set_on_delta([on_delta](int) { on_delta(); });
    EngineRequest request;
    request.request_id = id;
    request.prompt_token_ids = std::move(prompt);
    request.sampling.seed = 1;
    request.stopping.max_tokens = max_tokens;
    request.stopping.ignore_eos = true;
    request.sink = sink;
    absl::Status status = engine_->AddRequest(std::move(request));
    if (admission != nullptr) {
      *admission = status;
    } else {
      EXPECT_TRUE(status.ok()) << status;
    }
    return sink;
  }

  static std::vector<int32_t> Reference(const std::vector<int32_t>& prompt, int max_tokens) {
    std::string out = RunShell(absl::StrCat(
        pagoda::testing::PythonBinary(), " tests/reference/llama_reference.py generate", " --model ", *model_dir_,
        " --tokens ", absl::StrJoin(prompt, ","), " --max-tokens ", max_tokens, " --ignore-eos"));
    std::vector<int32_t> ids;
    for (absl::string_view part : absl::StrSplit(out, ',', absl::SkipWhitespace())) {
      int id;
      EXPECT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &id)) << out;
      ids.push_back(id);
    }
    return ids;
  }

  static std::vector<int32_t> Prompt(int length, int salt) {
    std::vector<int32_t> prompt;
    for (int i = 0; i < length; ++i) prompt.push_back(3 + (i * 7 + salt * 13) % (kVocab - 3));
    return prompt;
  }

  static std::string* model_dir_;
  EngineObserver* observer_ = nullptr;  // Set before StartEngine to watch it.
  std::unique_ptr<InProcessWorkerGroup> workers_;
  std::unique_ptr<HookedWorkers> hooked_;
  std::unique_ptr<Engine> engine_;
};

std::string* EngineTest::model_dir_ = nullptr;

TEST_F(EngineTest, GreedyTokensMatchReference) {
  StartEngine(64);
  const std::vector<int32_t> prompt = Prompt(9, 1);
  auto sink = Submit("a", prompt, 6);
  ASSERT_TRUE(sink->WaitFinished());
  EXPECT_TRUE(sink->status().ok()) << sink->status();
  EXPECT_EQ(sink->tokens(), Reference(prompt, 6));
  EXPECT_EQ(sink->last_status(), SequenceStatus::kFinishedLength);
  EXPECT_EQ(sink->num_deltas(), 6);  // One delta per token, in order.
  ASSERT_TRUE(engine_->WaitUntilIdle(absl::Seconds(5)));
  const EngineSnapshot snapshot = engine_->snapshot();
  EXPECT_EQ(snapshot.free_gpu_blocks, 64);
  EXPECT_EQ(snapshot.generation_tokens_total, 6);
  EXPECT_EQ(snapshot.prompt_tokens_total, 9);
  EXPECT_GE(snapshot.num_steps, 6);
}

// The finished requests' records, as the metrics see them.
class RecordingObserver : public EngineObserver {
 public:
  void OnStep(const StepRecord&, const EngineSnapshot&) override {}
  void OnRequestFinished(const RequestRecord& record) override {
    absl::MutexLock lock(&mu_);
    records_.push_back(record);
  }
  std::vector<RequestRecord> records() {
    absl::MutexLock lock(&mu_);
    return records_;
  }

 private:
  absl::Mutex mu_;
  std::vector<RequestRecord> records_ ABSL_GUARDED_BY(mu_);
};

// The queue time's end: the step that first scheduled the request's prompt
// (decode rows skip the lookup that records it).
TEST_F(EngineTest, FirstScheduledTimeIsTheFirstPromptStep) {
  RecordingObserver observer;
  observer_ = &observer;
  StartEngine(64);
  auto a = Submit("a", Prompt(9, 1), 4);
  auto b = Submit("b", Prompt(20, 2), 3);
  ASSERT_TRUE(a->WaitFinished());
  ASSERT_TRUE(b->WaitFinished());
  ASSERT_TRUE(engine_->WaitUntilIdle(absl::Seconds(5)));
  engine_.reset();  // Stops the engine before `observer` goes.
  const std::vector<RequestRecord> records = observer.records();
  ASSERT_EQ(records.size(), 2u);
  for (const RequestRecord& record : records) {
    EXPECT_NE(record.first_scheduled_time, absl::InfinitePast());
    EXPECT_LE(record.arrival_time, record.first_scheduled_time);
    EXPECT_LE(record.first_scheduled_time, record.first_token_time);
  }
}

TEST_F(EngineTest, ConcurrentRequestsGiveTheirSoloTokens) {
  StartEngine(96);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> max_tokens;
  for (int i = 0; i < 8; ++i) {
    prompts.push_back(Prompt(1 + i * 5, i));
    max_tokens.push_back(3 + i % 4);
  }
  // Alone first, one after the other.
  std::vector<std::vector<int32_t>> solo;
  for (int i = 0; i < 8; ++i) {
    auto sink = Submit(absl::StrCat("solo", i), prompts[i], max_tokens[i]);
    ASSERT_TRUE(sink->WaitFinished());
    solo.push_back(sink->tokens());
    ASSERT_EQ(solo.back().size(), static_cast<size_t>(max_tokens[i]));
  }
  // Then all at once. Steps wait until all eight are queued: on a loaded
  // machine the engine could otherwise finish each short request before this
  // thread submits the next, and nothing would be batched.
  auto all_queued = std::make_shared<absl::Notification>();
  hooked_->set_before_step(
      [all_queued] { all_queued->WaitForNotificationWithTimeout(absl::Seconds(20)); });
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  for (int i = 0; i < 8; ++i)
    sinks.push_back(Submit(absl::StrCat("batch", i), prompts[i], max_tokens[i]));
  all_queued->Notify();
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(sinks[i]->WaitFinished());
    EXPECT_TRUE(sinks[i]->status().ok());
    EXPECT_EQ(sinks[i]->tokens(), solo[i]) << "request " << i;
  }
  ASSERT_TRUE(engine_->WaitUntilIdle(absl::Seconds(5)));
  EXPECT_EQ(engine_->snapshot().free_gpu_blocks, 96);
  EXPECT_GT(engine_->snapshot().batched_sequences_total, engine_->snapshot().num_steps);
}

// Overlapped scheduling against one step at a time, on requests that touch
// every path it changes: seeded sampling with penalties (the worker counts
// the token in flight), min_tokens and stop ids (requests that end while
// their next step is in flight), n = 2 (the fork waits for its token),
// logprobs, and a cache small enough to preempt (steps that may preempt
// wait for the step in flight). Same tokens either way, and the steps
// really overlapped.
TEST_F(EngineTest, OverlappedStepsGiveTheTokensOfStepsOneAtATime) {
  constexpr int kRequests = 12;
  constexpr int kBlocks = 40;
  struct Run {
    std::vector<std::map<int, CollectingSink::SequenceOutput>> outputs;
    EngineSnapshot snapshot;
  };
  auto run = [&](bool async_scheduling, Run* result) {
    StartEngine(kBlocks, 1024, true, 64, async_scheduling);
    auto all_queued = std::make_shared<absl::Notification>();
    hooked_->set_before_step(
        [all_queued] { all_queued->WaitForNotificationWithTimeout(absl::Seconds(20)); });
    std::vector<std::shared_ptr<CollectingSink>> sinks;
    for (int i = 0; i < kRequests; ++i) {
      auto sink = std::make_shared<CollectingSink>();
      EngineRequest request;
      request.request_id = absl::StrCat("r", i);
      request.prompt_token_ids = Prompt(3 + 4 * i, i);
      request.sampling.seed = 100 + i;
      request.sampling.temperature = i % 3 == 0 ? 0.0f : 0.9f;
      request.sampling.num_logprobs = i % 2;
      request.stopping.max_tokens = 8 + (i * 5) % 13;
      request.stopping.ignore_eos = true;
      if (i % 4 == 1) {
        request.sampling.presence_penalty = 0.5f;
        request.sampling.frequency_penalty = 0.3f;
        request.sampling.repetition_penalty = 1.3f;
      } else if (i % 4 == 2) {
        request.stopping.ignore_eos = false;
        request.stopping.min_tokens = 3;
        for (int32_t id = 3; id < kVocab; id += 9) request.stopping.stop_token_ids.push_back(id);
      } else if (i % 4 == 3) {
        request.sampling.n = 2;
        request.sampling.best_of = 2;
      }
      request.sink = sink;
      ASSERT_TRUE(engine_->AddRequest(std::move(request)).ok());
      sinks.push_back(sink);
    }
    all_queued->Notify();
    for (const auto& sink : sinks) {
      ASSERT_TRUE(sink->WaitFinished());
      EXPECT_TRUE(sink->status().ok()) << sink->status();
      result->outputs.push_back(sink->sequences());
    }
    ASSERT_TRUE(engine_->WaitUntilIdle(absl::Seconds(5)));
    result->snapshot = engine_->snapshot();
    EXPECT_EQ(result->snapshot.free_gpu_blocks, kBlocks);
    engine_.reset();
  };
  Run one_at_a_time;
  ASSERT_NO_FATAL_FAILURE(run(false, &one_at_a_time));
  Run overlapped;
  ASSERT_NO_FATAL_FAILURE(run(true, &overlapped));
  EXPECT_EQ(one_at_a_time.snapshot.num_overlapped_steps, 0);
  EXPECT_GT(overlapped.snapshot.num_overlapped_steps, overlapped.snapshot.num_steps / 4);
  EXPECT_GT(overlapped.snapshot.num_preemptions_total, 0);
  EXPECT_EQ(overlapped.snapshot.generation_tokens_total,
            one_at_a_time.snapshot.generation_tokens_total);
  int stopped_early = 0;
  for (int i = 0; i < kRequests; ++i) {
    const auto& want = one_at_a_time.outputs[i];
    const auto& got = overlapped.outputs[i];
    ASSERT_EQ(got.size(), want.size()) << "request " << i;
    for (const auto& [index, seq] : want) {
      const auto& other = got.at(index);
      EXPECT_EQ(other.status, seq.status) << "request " << i << " sequence " << index;
      ASSERT_EQ(other.tokens.size(), seq.tokens.size()) << "request " << i << " seq " << index;
      for (size_t t = 0; t < seq.tokens.size(); ++t) {
        EXPECT_EQ(other.tokens[t].token_id, seq.tokens[t].token_id)
            << "request " << i << " token " << t;
        EXPECT_NEAR(other.tokens[t].logprob, seq.tokens[t].logprob, 1e-4) << "request " << i;
        EXPECT_EQ(other.tokens[t].top.size(), seq.tokens[t].top.size()) << "request " << i;
      }
      if (seq.status == SequenceStatus::kFinishedStopped) ++stopped_early;
    }
  }
  EXPECT_GT(stopped_early, 0);  // Some ended while their next step was in flight.
}

TEST_F(EngineTest, AbortFreesBlocksAndReportsCancelled) {
  StartEngine(64);
  // The engine waits in its first delta until the abort is queued: the CPU
  // worker could otherwise finish all 200 tokens before this thread wakes.
  absl::Notification first_token, aborted;
  auto sink = std::make_shared<CollectingSink>();
  sink->set_on_delta([&](int) {
    if (first_token.HasBeenNotified()) return;
    first_token.Notify();
    aborted.WaitForNotificationWithTimeout(absl::Seconds(20));
  });
  EngineRequest request;
  request.request_id = "long";
  request.prompt_token_ids = Prompt(20, 2);
  request.stopping.max_tokens = 200;
  request.stopping.ignore_eos = true;
  request.sampling.seed = 1;
  request.sink = sink;
  ASSERT_TRUE(engine_->AddRequest(std::move(request)).ok());
  ASSERT_TRUE(first_token.WaitForNotificationWithTimeout(absl::Seconds(20)));
  engine_->AbortRequest("long");
  aborted.Notify();
  ASSERT_TRUE(sink->WaitFinished());
  EXPECT_EQ(sink->status().code(), absl::StatusCode::kCancelled);
  EXPECT_LT(sink->tokens().size(), 200u);
  ASSERT_TRUE(engine_->WaitUntilIdle(absl::Seconds(5)));
  EXPECT_EQ(engine_->snapshot().free_gpu_blocks, 64);
  // The id is free again.
  auto again = Submit("long", Prompt(3, 1), 2);
  ASSERT_TRUE(again->WaitFinished());
  EXPECT_TRUE(again->status().ok());
}

// A late abort from a call whose own request was refused or has ended names
// the request by id only; it must not abort another request with that id.
TEST_F(EngineTest, AbortWithAnotherSinkLeavesTheRequestAlone) {
  StartEngine(64);
  auto sink = Submit("x", Prompt(6, 1), 40);
  auto other = std::make_shared<CollectingSink>();  // A refused duplicate's.
  engine_->AbortRequest("x", other.get());
  ASSERT_TRUE(sink->WaitFinished());
  EXPECT_TRUE(sink->status().ok()) << sink->status();
  EXPECT_EQ(sink->tokens().size(), 40u);
  // Its own sink's abort does abort.
  auto again = Submit("y", Prompt(6, 2), 200);
  engine_->AbortRequest("y", again.get());
  ASSERT_TRUE(again->WaitFinished());
  EXPECT_EQ(again->status().code(), absl::StatusCode::kCancelled);
  ASSERT_TRUE(engine_->WaitUntilIdle(absl::Seconds(5)));
  EXPECT_EQ(engine_->snapshot().free_gpu_blocks, 64);
}

// Requests admitted since the last snapshot count as queued: the limit holds
// even while the engine is inside a step.
TEST_F(EngineTest, QueueLimitCountsRequestsAdmittedSinceTheLastSnapshot) {
  StartEngine(64, /*max_queued_requests=*/1, /*start=*/true, /*max_num_seqs=*/1);
  absl::Notification running, hook_set;
  auto a = std::make_shared<CollectingSink>();
  // By its second delta the snapshot after its first step is published. The
  // engine waits there until the step hook is set: "a" could otherwise end
  // (and the engine go idle) first.
  int a_deltas = 0;  // Engine thread only.
  a->set_on_delta([&](int) {
    if (++a_deltas != 2) return;
    running.Notify();
    hook_set.WaitForNotificationWithTimeout(absl::Seconds(20));
  });
  {
    EngineRequest request;
    request.request_id = "a";
    request.prompt_token_ids = Prompt(5, 1);
    request.stopping.max_tokens = 200;
    request.stopping.ignore_eos = true;
    request.sink = a;
    ASSERT_TRUE(engine_->AddRequest(std::move(request)).ok());
  }
  ASSERT_TRUE(running.WaitForNotificationWithTimeout(absl::Seconds(20)));
  // Step k: "b" arrives (queue empty: accepted). Step k+1: "b" now waits in
  // the scheduler, which the snapshot of step k did not see; "c" must be
  // refused all the same.
  int calls = 0;
  absl::Status b_status, c_status;
  std::shared_ptr<CollectingSink> b, c;
  absl::Notification hooked;
  hooked_->set_before_step([&] {
    ++calls;
    if (calls == 1) b = Submit("b", Prompt(4, 2), 2, &b_status);
    if (calls == 2) {
      c = Submit("c", Prompt(4, 3), 2, &c_status);
      hooked.Notify();
    }
  });
  hook_set.Notify();
  ASSERT_TRUE(hooked.WaitForNotificationWithTimeout(absl::Seconds(20)));
  hooked_->set_before_step(nullptr);
  EXPECT_TRUE(b_status.ok()) << b_status;
  EXPECT_EQ(c_status.code(), absl::StatusCode::kResourceExhausted) << c_status;
  engine_->AbortRequest("a");
  ASSERT_TRUE(a->WaitFinished());
  ASSERT_TRUE(b->WaitFinished());
  EXPECT_TRUE(b->status().ok()) << b->status();
  if (c_status.ok()) {
    ASSERT_TRUE(c->WaitFinished());
  }
  ASSERT_TRUE(engine_->WaitUntilIdle(absl::Seconds(5)));
}

TEST_F(EngineTest, WorkerFailureFailsEverythingWithUnavailable) {
  StartEngine(64);
  // The workers crash on a's first token, but not before b is queued: a
  // crash first would rightly refuse b at admission.
  absl::Notification b_queued;
  auto a = Submit("a", Prompt(5, 1), 100, nullptr, [this, &b_queued] {
    b_queued.WaitForNotification();
    workers_->SimulateCrash();
  });
  auto b = Submit("b", Prompt(7, 2), 100);
  b_queued.Notify();
  ASSERT_TRUE(a->WaitFinished());
  ASSERT_TRUE(b->WaitFinished());
  EXPECT_EQ(a->status().code(), absl::StatusCode::kUnavailable) << a->status();
  EXPECT_EQ(b->status().code(), absl::StatusCode::kUnavailable) << b->status();
  EXPECT_FALSE(engine_->healthy());
  EXPECT_FALSE(engine_->snapshot().healthy);
  absl::Status admission;
  Submit("c", Prompt(3, 3), 2, &admission);
  EXPECT_EQ(admission.code(), absl::StatusCode::kUnavailable);
}

TEST_F(EngineTest, RejectedPlanFailsTheStepButKeepsServing) {
  StartEngine(64);
  // The frontend would refuse this id; here it reaches the worker, which
  // rejects the plan without changing state.
  auto bad = Submit("bad", {5, kVocab + 7, 6}, 4);
  ASSERT_TRUE(bad->WaitFinished());
  EXPECT_EQ(bad->status().code(), absl::StatusCode::kInternal) << bad->status();
  EXPECT_TRUE(engine_->healthy());
  ASSERT_TRUE(engine_->WaitUntilIdle(absl::Seconds(5)));
  EXPECT_EQ(engine_->snapshot().free_gpu_blocks, 64);
  auto good = Submit("good", Prompt(4, 1), 3);
  ASSERT_TRUE(good->WaitFinished());
  EXPECT_TRUE(good->status().ok()) << good->status();
  EXPECT_EQ(good->tokens(), Reference(Prompt(4, 1), 3));
}

// A rejected step fails the requests it held, not those that arrived while it
// ran: they were never part of it. Under async scheduling the late request
// may already sit in the step sent after the rejected one (the engine
// thread took it before waiting for the rejected step: a TSan run's
// timing); that step is abandoned and the request resumes by recomputation.
TEST_F(EngineTest, RejectedPlanKeepsRequestsThatArrivedDuringTheStep) {
  StartEngine(64);
  std::shared_ptr<CollectingSink> late;
  bool submitted = false;
  hooked_->set_before_step([&] {
    if (submitted) return;
    submitted = true;
    late = Submit("late", Prompt(4, 1), 3);
  });
  auto bad = Submit("bad", {5, kVocab + 7, 6}, 4);
  ASSERT_TRUE(bad->WaitFinished());
  EXPECT_EQ(bad->status().code(), absl::StatusCode::kInternal) << bad->status();
  ASSERT_TRUE(engine_->WaitUntilIdle(absl::Seconds(20)));
  hooked_->set_before_step(nullptr);
  ASSERT_NE(late, nullptr);
  ASSERT_TRUE(late->WaitFinished());
  EXPECT_TRUE(late->status().ok()) << late->status();
  EXPECT_EQ(late->tokens().size(), 3u);
  EXPECT_EQ(engine_->snapshot().free_gpu_blocks, 64);
}

TEST_F(EngineTest, PromptTooLongForTheCacheIsInvalidArgument) {
  StartEngine(4);  // 16 tokens of KV cache.
  auto sink = Submit("big", Prompt(40, 1), 2);
  ASSERT_TRUE(sink->WaitFinished());
  EXPECT_EQ(sink->status().code(), absl::StatusCode::kInvalidArgument) << sink->status();
  EXPECT_NE(sink->status().message().find("prompt"), std::string::npos);
  // And the engine goes on serving.
  auto small = Submit("small", Prompt(3, 1), 2);
  ASSERT_TRUE(small->WaitFinished());
  EXPECT_TRUE(small->status().ok());
}

TEST_F(EngineTest, SequenceThatOutgrowsTheCacheEndsAtLengthWithItsTokens) {
  StartEngine(8);  // 32 tokens of KV cache; the request alone outgrows it.
  const std::vector<int32_t> prompt = Prompt(5, 2);
  auto sink = Submit("long", prompt, 100);
  ASSERT_TRUE(sink->WaitFinished());
  // It preempts itself at 32 tokens, is recomputed, and at 33 can never run
  // again: what it generated stays, as if max_tokens had ended it.
  EXPECT_TRUE(sink->status().ok()) << sink->status();
  EXPECT_EQ(sink->last_status(), SequenceStatus::kFinishedLength);
  const std::vector<int32_t> tokens = sink->tokens();
  EXPECT_GE(tokens.size(), 32u - prompt.size());
  EXPECT_LT(tokens.size(), 100u);
  EXPECT_EQ(tokens, Reference(prompt, static_cast<int>(tokens.size())));
  ASSERT_TRUE(engine_->WaitUntilIdle(absl::Seconds(5)));
  EXPECT_EQ(engine_->snapshot().free_gpu_blocks, 8);
}

TEST_F(EngineTest, BestOfGroupThatOutgrowsTheCacheReturnsItsBestAtLength) {
  StartEngine(16);  // 64 tokens of KV cache for two samples of one request.
  auto sink = std::make_shared<CollectingSink>();
  EngineRequest request;
  request.request_id = "best";
  request.prompt_token_ids = Prompt(5, 3);
  request.sampling.seed = 1;
  request.sampling.temperature = 1.0f;
  request.sampling.n = 1;
  request.sampling.best_of = 2;  // Answered only at the end: FinalDelta.
  request.stopping.max_tokens = 100;
  request.stopping.ignore_eos = true;
  request.sink = sink;
  ASSERT_TRUE(engine_->AddRequest(std::move(request)).ok());
  ASSERT_TRUE(sink->WaitFinished());
  EXPECT_TRUE(sink->status().ok()) << sink->status();
  const auto sequences = sink->sequences();
  ASSERT_EQ(sequences.size(), 1u);
  const auto& best = sequences.begin()->second;
  EXPECT_EQ(sequences.begin()->first, 0);
  EXPECT_EQ(best.status, SequenceStatus::kFinishedLength);
  EXPECT_GE(best.tokens.size(), 20u);
  EXPECT_LT(best.tokens.size(), 100u);
  ASSERT_TRUE(engine_->WaitUntilIdle(absl::Seconds(5)));
  EXPECT_EQ(engine_->snapshot().free_gpu_blocks, 16);
}

TEST_F(EngineTest, AdmissionErrors) {
  StartEngine(64, /*max_queued_requests=*/2, /*start=*/false);
  absl::Status status;
  auto x = Submit("x", Prompt(3, 1), 2, &status);
  EXPECT_TRUE(status.ok());
  Submit("x", Prompt(3, 1), 2, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
  Submit("y", Prompt(3, 1), 2, &status);
  EXPECT_TRUE(status.ok());
  Submit("z", Prompt(3, 1), 2, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  // Never started: queued requests still get an answer.
  engine_->Stop();
  ASSERT_TRUE(x->WaitFinished());
  EXPECT_EQ(x->status().code(), absl::StatusCode::kUnavailable);
  Submit("w", Prompt(3, 1), 2, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
}

// A client may reuse a request id as soon as it has the request's final
// response, as with vLLM: the engine frees the id before answering (it used
// to free it with the step's snapshot, after the answer had gone out).
TEST_F(EngineTest, AnIdIsFreeOnceItsFinalResponseIsOut) {
  StartEngine(64);
  absl::Status again_status = absl::UnknownError("not submitted");
  std::shared_ptr<CollectingSink> again;
  auto first = std::make_shared<CollectingSink>();
  first->set_on_finish([&] { again = Submit("same", Prompt(4, 2), 3, &again_status); });
  EngineRequest request;
  request.request_id = "same";
  request.prompt_token_ids = Prompt(4, 1);
  request.stopping.max_tokens = 3;
  request.stopping.ignore_eos = true;
  request.sink = first;
  ASSERT_TRUE(engine_->AddRequest(std::move(request)).ok());
  ASSERT_TRUE(first->WaitFinished());
  EXPECT_TRUE(first->status().ok()) << first->status();
  ASSERT_TRUE(again_status.ok()) << again_status;
  ASSERT_TRUE(again->WaitFinished());
  EXPECT_TRUE(again->status().ok()) << again->status();
  EXPECT_EQ(again->tokens().size(), 3u);
  ASSERT_TRUE(engine_->WaitUntilIdle(absl::Seconds(20)));
  EXPECT_EQ(engine_->snapshot().num_in_flight, 0);
}

TEST_F(EngineTest, DrainFinishesInFlightAndRefusesNew) {
  StartEngine(64);
  auto a = Submit("a", Prompt(5, 1), 8);
  engine_->StopAccepting();
  absl::Status status;
  Submit("b", Prompt(5, 1), 8, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(engine_->WaitUntilIdle(absl::Seconds(20)));
  ASSERT_TRUE(a->WaitFinished());
  EXPECT_TRUE(a->status().ok());
  EXPECT_EQ(a->tokens().size(), 8u);
}

TEST_F(EngineTest, StopFailsRemainingWithUnavailable) {
  StartEngine(64);
  auto a = Submit("a", Prompt(5, 1), 100);
  engine_->Stop();
  ASSERT_TRUE(a->WaitFinished());
  // Either it finished in time or it was failed; never silently dropped.
  EXPECT_TRUE(a->status().ok() || a->status().code() == absl::StatusCode::kUnavailable)
      << a->status();
}

}  // namespace
}  // namespace pagoda::scheduler
