// LoraStepper around a real Scheduler: waiting requests whose adapter is not
// yet loaded on the workers are passed over (base-model requests go on), run
// once the load answered, never more distinct adapters in a step than slots;
// a failed load names the adapter; an unloaded adapter's slot is emptied on
// the workers; a restart empties every slot; the metric's labels.
// The workers here only record the slot calls (the real worker's loads are
// tests/engine/lora_engine_test.cc's).

#include "scheduler/engine/lora_step.h"

#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "scheduler/engine/output_processor.h"
#include "scheduler/engine/step_plan.h"

namespace pagoda::scheduler {
namespace {

namespace wv1 = ::pagoda::worker::v1;

// Records the LoRA calls; a load of a path containing "bad" fails as the
// worker refuses a bad adapter, and loads wait while `held` is set.
class SlotRecordingWorkers : public WorkerGroup {
 public:
  absl::StatusOr<wv1::LoadModelResponse> LoadModel(const wv1::LoadModelRequest&) override {
    return wv1::LoadModelResponse();
  }
  absl::Status InitCache(const wv1::InitCacheRequest&) override { return absl::OkStatus(); }
  absl::StatusOr<wv1::StepResult> ExecuteStep(const wv1::StepPlan&,
                                              const StepMaskSource&) override {
    return absl::UnimplementedError("no steps here");
  }
  absl::StatusOr<wv1::LoadLoraAdapterResponse> LoadLoraAdapter(
      const wv1::LoadLoraAdapterRequest& request) override {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](bool* held) { return !*held; }, &held_));
    calls_.push_back(absl::StrCat("load ", request.slot(), " ", request.path()));
    if (request.path().find("bad") != std::string::npos) {
      return absl::InvalidArgumentError(request.path() + ": rank 64 is above --max-lora-rank 16");
    }
    return wv1::LoadLoraAdapterResponse();
  }
  absl::Status UnloadLoraAdapter(const wv1::UnloadLoraAdapterRequest& request) override {
    absl::MutexLock lock(&mu_);
    calls_.push_back(absl::StrCat("unload ", request.slot()));
    return absl::OkStatus();
  }
  bool Healthy() const override { return true; }
  int world_size() const override { return 1; }
  void Shutdown() override {}

  void Hold(bool held) {
    absl::MutexLock lock(&mu_);
    held_ = held;
  }
  std::vector<std::string> TakeCalls() {
    absl::MutexLock lock(&mu_);
    return std::exchange(calls_, {});
  }

 private:
  absl::Mutex mu_;
  bool held_ = false;
  std::vector<std::string> calls_;
};

SchedulerConfig SmallConfig() {
  SchedulerConfig config;
  config.block_size = 4;
  config.num_gpu_blocks = 64;
  config.max_num_seqs = 16;
  config.max_num_batched_tokens = 256;
  config.max_model_len = 64;
  config.enable_chunked_prefill = true;  // Decodes and prompts in one step.
  return config;
}

class LoraStepTest : public ::testing::Test {
 protected:
  LoraStepTest() {
    for (const char* name : {"sql", "chat", "bad"}) {
      ids_.push_back(*registry_.Add({name, absl::StrCat("/adapters/", name), ""}));
    }
  }

  // A waiting request `id` for adapter `lora` (0: the base model).
  void Add(int id, int lora) {
    std::vector<int32_t> prompt(5);
    std::iota(prompt.begin(), prompt.end(), 100 * id);
    StoppingOptions stopping;
    stopping.max_tokens = 40;
    auto group = std::make_unique<SequenceGroup>(absl::StrCat("r", id), std::move(prompt), id,
                                                 SamplingOptions{}, stopping,
                                                 absl::FromUnixSeconds(1000 + id));
    group->set_lora_id(lora);
    scheduler_.AddSequenceGroup(std::move(group));
  }

  // One step as the engine runs it: plan, schedule, stamp, and the tokens
  // appended. Returns "request:slot" per row.
  std::vector<std::string> Step() {
    for (LoraStepper::FailedLoad& load : stepper_.TakeFailedLoads()) failed_.push_back(load);
    stepper_.BeforeSchedule(scheduler_, /*step_in_flight=*/false);
    output_ = scheduler_.Schedule();
    stepper_.AfterSchedule(scheduler_);
    wv1::StepPlan plan;
    BuildStepPlanInto(step_id_++, output_, scheduler_.block_manager(), {2}, &plan);
    stepper_.AttachSlots(output_, plan);
    std::vector<std::string> rows;
    for (int i = 0; i < plan.sequences_size(); ++i) {
      rows.push_back(absl::StrCat(output_.scheduled[i].group->request_id(), ":",
                                  plan.sequences(i).lora_slot()));
    }
    std::vector<GeneratedToken> sampled;
    for (const ScheduledSequence& entry : output_.scheduled) {
      if (entry.do_sample) sampled.push_back({7, -0.5f, {}});
    }
    OutputProcessor processor({/*eos=*/2}, scheduler_.config().max_model_len, &scheduler_);
    processor.Process(output_, sampled);
    scheduler_.CommitComputedBlocks(output_);
    scheduler_.FreeFinished();
    return rows;
  }

  // Finishes request `id` (the client went away) and frees its blocks.
  void End(int id) { scheduler_.AbortRequest(absl::StrCat("r", id)); }

  // Every queued slot call answered (a deadline, never a fixed sleep).
  void WaitForLoader() {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (stepper_.loader().Busy() && absl::Now() < deadline)
      absl::SleepFor(absl::Milliseconds(1));
    ASSERT_FALSE(stepper_.loader().Busy());
  }

  Scheduler scheduler_{SmallConfig()};
  lora::LoraRegistry registry_;
  std::vector<int> ids_;  // sql, chat, bad.
  SlotRecordingWorkers workers_;
  LoraStepper stepper_{/*max_loras=*/1, &registry_, &workers_};
  SchedulerOutput output_;
  int64_t step_id_ = 0;
  std::vector<LoraStepper::FailedLoad> failed_;
};

TEST_F(LoraStepTest, DefersUntilLoadedAndNeverRunsMoreAdaptersThanSlots) {
  workers_.Hold(true);
  Add(1, ids_[0]);  // sql
  Add(2, ids_[1]);  // chat: behind sql, which takes the one slot.
  Add(3, 0);        // Base model.
  // sql's load is sent but not answered: only the base-model request runs.
  EXPECT_EQ(Step(), (std::vector<std::string>{"r3:0"}));
  EXPECT_FALSE(stepper_.ready(1));
  EXPECT_EQ(stepper_.slots()[0].adapter_id, ids_[0]);
  workers_.Hold(false);
  WaitForLoader();
  EXPECT_EQ(workers_.TakeCalls(), (std::vector<std::string>{"load 1 /adapters/sql"}));
  // Loaded on every rank: sql runs in slot 1; chat still waits for a slot.
  const std::vector<std::string> rows = Step();
  EXPECT_EQ(std::multiset<std::string>(rows.begin(), rows.end()),
            (std::multiset<std::string>{"r1:1", "r3:0"}));
  const LoraActivity activity = stepper_.Activity(scheduler_);
  EXPECT_EQ(activity.max_loras, 1);
  EXPECT_EQ(activity.running, (std::vector<std::string>{"sql"}));
  EXPECT_EQ(activity.waiting, (std::vector<std::string>{"chat"}));
  // sql ends: its slot goes to chat, which runs once the load answered.
  End(1);
  EXPECT_EQ(Step(), (std::vector<std::string>{"r3:0"}));
  WaitForLoader();
  EXPECT_EQ(workers_.TakeCalls(), (std::vector<std::string>{"load 1 /adapters/chat"}));
  EXPECT_EQ(Step(), (std::vector<std::string>{"r3:0", "r2:1"}));
  EXPECT_TRUE(failed_.empty());
}

TEST_F(LoraStepTest, AFailedLoadNamesTheAdapterAndFreesTheSlot) {
  Add(1, ids_[2]);  // bad
  EXPECT_TRUE(Step().empty());
  WaitForLoader();
  const std::vector<LoraStepper::FailedLoad> failed = stepper_.TakeFailedLoads();
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].lora_id, ids_[2]);
  EXPECT_EQ(failed[0].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(failed[0].status.message().find("the LoRA adapter \"bad\" could not be loaded"),
            std::string::npos)
      << failed[0].status;
  EXPECT_NE(failed[0].status.message().find("above --max-lora-rank"), std::string::npos);
  EXPECT_EQ(stepper_.slots()[0].adapter_id, 0);
  EXPECT_FALSE(stepper_.ready(1));
}

TEST_F(LoraStepTest, ForgetUnloadsTheSlotAndARestartEmptiesEverySlot) {
  Add(1, ids_[0]);
  Step();
  WaitForLoader();
  EXPECT_EQ(Step(), (std::vector<std::string>{"r1:1"}));
  End(1);
  workers_.TakeCalls();
  // The registry removed sql; no step is in flight: unloaded at once.
  stepper_.Forget(ids_[0], /*step_in_flight=*/false);
  WaitForLoader();
  EXPECT_EQ(workers_.TakeCalls(), (std::vector<std::string>{"unload 1"}));
  EXPECT_EQ(stepper_.slots()[0].adapter_id, 0);
  // chat loaded and running, then the workers restart: the slot counts as
  // empty and chat is loaded again before it runs.
  Add(2, ids_[1]);
  Step();
  WaitForLoader();
  EXPECT_EQ(Step(), (std::vector<std::string>{"r2:1"}));
  scheduler_.RequeueAllForRecompute();
  stepper_.ResetForRestart();
  EXPECT_FALSE(stepper_.ready(1));
  workers_.TakeCalls();
  workers_.Hold(true);
  EXPECT_TRUE(Step().empty());
  workers_.Hold(false);
  WaitForLoader();
  EXPECT_EQ(workers_.TakeCalls(), (std::vector<std::string>{"load 1 /adapters/chat"}));
  EXPECT_EQ(Step(), (std::vector<std::string>{"r2:1"}));
}

// Under overlapped scheduling, an adapter of the step in flight keeps its
// slot: its unload waits until no step in flight uses it.
TEST_F(LoraStepTest, AnUnloadWaitsForTheStepInFlight) {
  Add(1, ids_[0]);
  Step();
  WaitForLoader();
  EXPECT_EQ(Step(), (std::vector<std::string>{"r1:1"}));
  End(1);
  workers_.TakeCalls();
  stepper_.Forget(ids_[0], /*step_in_flight=*/true);
  WaitForLoader();
  EXPECT_TRUE(workers_.TakeCalls().empty());
  EXPECT_EQ(stepper_.slots()[0].adapter_id, ids_[0]);
  stepper_.BeforeSchedule(scheduler_, /*step_in_flight=*/false);
  stepper_.AfterSchedule(scheduler_);
  WaitForLoader();
  EXPECT_EQ(workers_.TakeCalls(), (std::vector<std::string>{"unload 1"}));
}

}  // namespace
}  // namespace pagoda::scheduler
