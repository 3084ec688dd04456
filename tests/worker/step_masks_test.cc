// Token masks that follow their step plan (SequenceStep.token_mask_follows),
// through real pagoda-worker processes and the server's worker group: one
// rank over its step channel, two ranks (TCP collectives) over gRPC's SendStepMasks.
// Also two ranks pipelining their steps on their step channels (overlapped
// scheduling), each step's input the token the step before sampled, with
// and without masks that follow (built once that token was read).
// The forward pass runs before the masks come and the sampler waits for
// them; masks that do not answer the plan are refused without harm; a
// worker killed between plan and masks is replaced and gives the same
// tokens; two ranks draw what one draws.

#include <signal.h>

#include <cerrno>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "scheduler/workers/async_step_queue.h"
#include "scheduler/workers/grpc_worker_group.h"

namespace pagoda::worker {
namespace {

namespace v1 = ::pagoda::worker::v1;
using ::pagoda::scheduler::GrpcWorkerGroup;

constexpr absl::Duration kStartTimeout = absl::Seconds(20);
constexpr int kBlockSize = 4;
constexpr int kVocabSize = 64;
constexpr int kDraws = 6;
constexpr int kLateDraws = 2;  // Draws whose masks come late (Decode's delay).
const std::vector<int> kPrompt = {5, 17, 33};

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

// The mask of draw `draw`: the ids congruent to -draw modulo 4 (a rule the
// sampled tokens are checked against).
bool Allowed(int draw, int token) { return (token + draw) % 4 == 0; }

std::string MaskOfDraw(int draw) {
  std::vector<uint32_t> words((kVocabSize + 31) / 32, 0);
  for (int id = 0; id < kVocabSize; ++id) {
    if (Allowed(draw, id)) words[id / 32] |= uint32_t{1} << (id % 32);
  }
  return std::string(reinterpret_cast<const char*>(words.data()), words.size() * 4);
}

// Draw `draw` of one seeded, sampled sequence: the prompt first, then the
// last token, its mask to follow.
v1::StepPlan DrawPlan(int64_t step_id, int draw, int last_token) {
  v1::StepPlan plan;
  plan.set_step_id(step_id);
  v1::SequenceStep* step = plan.add_sequences();
  step->set_seq_id(1);
  if (draw == 0) {
    for (int token : kPrompt) step->add_token_ids(token);
  } else {
    step->add_token_ids(last_token);
  }
  step->set_start_position(draw == 0 ? 0 : static_cast<int>(kPrompt.size()) + draw - 1);
  for (int block : {0, 1, 2, 3}) step->add_block_table(block);
  step->set_do_sample(true);
  step->set_sample_index(draw);
  step->set_token_mask_follows(true);
  v1::SamplingOptions* sampling = step->mutable_sampling();
  sampling->set_temperature(0.8f);
  sampling->set_seed(42);
  sampling->set_num_logprobs(2);
  return plan;
}

v1::StepMasks MasksFor(const v1::StepPlan& plan, const std::string& mask) {
  v1::StepMasks masks;
  masks.set_step_id(plan.step_id());
  v1::RowTokenMask* row = masks.add_rows();
  row->set_seq_id(plan.sequences(0).seq_id());
  row->set_token_mask(mask);
  return masks;
}

struct Decoded {
  std::vector<int> tokens;
  std::vector<float> logprobs;
  std::vector<double> mask_waits;
};

class StepMasksTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char dir_template[] = "/tmp/pagoda_step_masks_test_XXXXXX";
    ASSERT_NE(mkdtemp(dir_template), nullptr);
    model_dir_ = new std::string(dir_template);
    const std::string command = absl::StrCat(
        EnvOr("PAGODA_PYTHON3", "/usr/bin/python3"), " ", EnvOr("PAGODA_SOURCE_DIR", "."),
        "/scripts/make_tiny_model.py --out ", *model_dir_, "/model --vocab-size ", kVocabSize,
        " --hidden-size 32 --intermediate-size 64 --num-layers 2 --num-heads 4"
        " --num-kv-heads 2 --dtype f32 > /dev/null");
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*model_dir_);
    delete model_dir_;
  }

  // A group of `ranks` spawned workers, loaded, with a cache.
  static std::unique_ptr<GrpcWorkerGroup> ReadyGroup(int ranks) {
    auto group = GrpcWorkerGroup::Launch(PAGODA_WORKER_BINARY, ranks, kStartTimeout);
    EXPECT_TRUE(group.ok()) << group.status();
    if (!group.ok()) return nullptr;
    v1::LoadModelRequest load;
    load.set_model_dir(*model_dir_ + "/model");
    load.set_block_size(kBlockSize);
    load.set_device("cpu");
    load.set_kv_cache_memory_bytes(1 << 20);
    load.set_max_num_batched_tokens(64);
    load.set_max_num_seqs(4);
    load.set_cpu_threads(1);
    EXPECT_TRUE((*group)->LoadModel(load).ok());
    v1::InitCacheRequest init;
    init.set_num_gpu_blocks(16);
    EXPECT_TRUE((*group)->InitCache(init).ok());
    return *std::move(group);
  }

  // kDraws draws of the sequence, the masks of the first kLateDraws sent
  // `delay` after their plan went out; `before_masks(draw)` runs first (a
  // kill, say).
  static absl::StatusOr<Decoded> Decode(GrpcWorkerGroup& group, absl::Duration delay,
                                        const std::function<void(int)>& before_masks = nullptr) {
    Decoded decoded;
    static int64_t step_id = 100;  // Never reused on a worker.
    for (int draw = 0; draw < kDraws; ++draw) {
      const v1::StepPlan plan =
          DrawPlan(step_id++, draw, draw == 0 ? 0 : decoded.tokens.back());
      absl::StatusOr<v1::StepResult> result = group.ExecuteStep(plan, [&] {
        if (before_masks) before_masks(draw);
        if (draw < kLateDraws) absl::SleepFor(delay);
        return MasksFor(plan, MaskOfDraw(draw));
      });
      if (!result.ok()) return result.status();
      if (result->tokens_size() != 1) return absl::InternalError("one token per step expected");
      decoded.tokens.push_back(result->tokens(0).token_id());
      decoded.logprobs.push_back(result->tokens(0).logprob());
      decoded.mask_waits.push_back(result->mask_wait_seconds());
    }
    return decoded;
  }

  static std::string* model_dir_;
};

std::string* StepMasksTest::model_dir_ = nullptr;

// The masks come 150 ms after their plan: the worker has run the forward
// pass by then (it waited most of that time after it), and draws only
// what the late mask allows. Two ranks, whose masks travel by
// SendStepMasks, draw exactly what one rank draws over its step channel.
TEST_F(StepMasksTest, LateMasksAreWaitedForAfterTheForwardPassAndTwoRanksDrawAsOne) {
  std::vector<Decoded> runs;
  for (int ranks : {1, 2}) {
    std::unique_ptr<GrpcWorkerGroup> group = ReadyGroup(ranks);
    ASSERT_NE(group, nullptr);
    const absl::Time start = absl::Now();
    absl::StatusOr<Decoded> decoded = Decode(*group, absl::Milliseconds(150));
    ASSERT_TRUE(decoded.ok()) << ranks << " ranks: " << decoded.status();
    EXPECT_GE(absl::Now() - start, kLateDraws * absl::Milliseconds(150));
    for (int draw = 0; draw < kDraws; ++draw) {
      EXPECT_TRUE(Allowed(draw, decoded->tokens[draw])) << ranks << " ranks, draw " << draw;
      // Measured from the end of the forward pass: most of the delay.
      if (draw < kLateDraws) {
        EXPECT_GT(decoded->mask_waits[draw], 0.05) << ranks << " ranks, draw " << draw;
      }
    }
    runs.push_back(*std::move(decoded));
  }
  EXPECT_EQ(runs[1].tokens, runs[0].tokens);
  for (int draw = 0; draw < kDraws; ++draw) {
    EXPECT_NEAR(runs[1].logprobs[draw], runs[0].logprobs[draw], 1e-4) << draw;
  }
}

// Masks that do not answer their plan (another step's, a row too many, a
// mask of the wrong length), or none for a plan that promises some: the
// step is refused INVALID_ARGUMENT, the group stays healthy and the next
// step is served.
TEST_F(StepMasksTest, MasksThatDoNotAnswerThePlanAreRefusedAndTheGroupServesOn) {
  for (int ranks : {1, 2}) {
    std::unique_ptr<GrpcWorkerGroup> group = ReadyGroup(ranks);
    ASSERT_NE(group, nullptr);
    int64_t step_id = 0;
    const std::vector<std::function<void(v1::StepMasks&)>> breakages = {
        [](v1::StepMasks& m) { m.set_step_id(m.step_id() + 100); },
        [](v1::StepMasks& m) { *m.add_rows() = m.rows(0); },
        [](v1::StepMasks& m) { m.mutable_rows(0)->mutable_token_mask()->append(4, '\0'); },
        [](v1::StepMasks& m) { m.mutable_rows(0)->set_seq_id(2); },
    };
    for (size_t i = 0; i < breakages.size(); ++i) {
      const v1::StepPlan plan = DrawPlan(step_id++, 0, 0);
      absl::StatusOr<v1::StepResult> result = group->ExecuteStep(plan, [&] {
        v1::StepMasks masks = MasksFor(plan, MaskOfDraw(0));
        breakages[i](masks);
        return masks;
      });
      EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument)
          << ranks << " ranks, case " << i << ": " << result.status();
      EXPECT_TRUE(group->Healthy()) << ranks << " ranks, case " << i;
    }
    EXPECT_EQ(group->ExecuteStep(DrawPlan(step_id++, 0, 0)).status().code(),
              absl::StatusCode::kInvalidArgument);
    const v1::StepPlan plan = DrawPlan(step_id++, 0, 0);
    absl::StatusOr<v1::StepResult> served =
        group->ExecuteStep(plan, [&] { return MasksFor(plan, MaskOfDraw(0)); });
    ASSERT_TRUE(served.ok()) << ranks << " ranks: " << served.status();
    EXPECT_TRUE(Allowed(0, served->tokens(0).token_id()));
  }
}

// The worker dies after its plan went out and before its masks do: the
// step fails UNAVAILABLE, Recover brings a new worker, and the sequence
// recomputed from its prompt draws the tokens of a run without the kill.
TEST_F(StepMasksTest, AWorkerKilledBetweenPlanAndMasksIsReplacedAndDrawsTheSameTokens) {
  std::unique_ptr<GrpcWorkerGroup> group = ReadyGroup(1);
  ASSERT_NE(group, nullptr);
  absl::StatusOr<Decoded> expected = Decode(*group, absl::ZeroDuration());
  ASSERT_TRUE(expected.ok()) << expected.status();

  const pid_t pid = group->worker_pids().at(0);
  absl::StatusOr<Decoded> killed = Decode(*group, absl::ZeroDuration(), [&](int draw) {
    if (draw != 3) return;
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    // Gone (reaped or a zombie) before the masks are sent.
    for (int i = 0; i < 500 && kill(pid, 0) == 0 && group->Healthy(); ++i) {
      absl::SleepFor(absl::Milliseconds(2));
    }
  });
  EXPECT_EQ(killed.status().code(), absl::StatusCode::kUnavailable) << killed.status();
  ASSERT_TRUE(group->Recover().ok());
  absl::StatusOr<Decoded> resumed = Decode(*group, absl::ZeroDuration());
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->tokens, expected->tokens);
}

// A spawned group of two ranks pipelines its steps (overlapped scheduling,
// scheduler/workers/async_step_queue.h): all of a sequence's steps go out on
// the ranks' step channels before the first answer is read, each but the
// first taking its input from the token the step before sampled (rank 0
// samples, rank 1 receives it), and they draw what the group draws one step
// at a time with the tokens sent.
TEST_F(StepMasksTest, TwoRanksPipelineTheirStepsAndDrawWhatTheyDrawOneAtATime) {
  std::unique_ptr<GrpcWorkerGroup> group = ReadyGroup(2);
  ASSERT_NE(group, nullptr);
  ASSERT_TRUE(group->SupportsPipelinedSteps());
  const auto unmasked_plan = [](int64_t step_id, int draw, int last_token) {
    v1::StepPlan plan = DrawPlan(step_id, draw, last_token);
    plan.mutable_sequences(0)->set_token_mask_follows(false);
    return plan;
  };
  int64_t step_id = 500;
  std::vector<int> one_at_a_time;
  for (int draw = 0; draw < kDraws; ++draw) {
    absl::StatusOr<v1::StepResult> result =
        group->ExecuteStep(unmasked_plan(step_id++, draw, draw == 0 ? 0 : one_at_a_time.back()));
    ASSERT_TRUE(result.ok()) << result.status();
    one_at_a_time.push_back(result->tokens(0).token_id());
  }
  std::vector<v1::StepPlan> plans;
  for (int draw = 0; draw < kDraws; ++draw) {
    // The input sent is a stand-in: the ranks substitute their last sample.
    plans.push_back(unmasked_plan(step_id++, draw, /*last_token=*/0));
    plans.back().mutable_sequences(0)->set_input_from_last_sample(draw > 0);
    ASSERT_TRUE(group->SendStep(plans.back(), nullptr).ok()) << draw;
  }
  std::vector<int> pipelined;
  for (int draw = 0; draw < kDraws; ++draw) {
    absl::StatusOr<v1::StepResult> result = group->ReceiveStep();
    ASSERT_TRUE(result.ok()) << draw << ": " << result.status();
    EXPECT_EQ(result->step_id(), plans[draw].step_id());
    ASSERT_EQ(result->tokens_size(), 1);
    pipelined.push_back(result->tokens(0).token_id());
  }
  EXPECT_EQ(pipelined, one_at_a_time);
  EXPECT_TRUE(group->Healthy());

  // A constrained row under overlap (scheduler/engine/step_pipeline.h):
  // each placeholder's mask follows its plan, and depends on the token the
  // step before drew, so the server's step queue writes every plan at once
  // and each mask only once that token was read (the ranks run the forward
  // pass meanwhile). The draws are those of masked steps one at a time.
  std::vector<int> masked_one_at_a_time;
  for (int draw = 0; draw < kDraws; ++draw) {
    const int last = draw == 0 ? 0 : masked_one_at_a_time.back();
    const v1::StepPlan plan = DrawPlan(step_id++, draw, last);
    absl::StatusOr<v1::StepResult> result =
        group->ExecuteStep(plan, [&] { return MasksFor(plan, MaskOfDraw(draw + last)); });
    ASSERT_TRUE(result.ok()) << result.status();
    masked_one_at_a_time.push_back(result->tokens(0).token_id());
  }
  std::deque<v1::StepPlan> masked_plans;  // The queue keeps pointers to them.
  std::vector<absl::Notification> read(kDraws);
  std::vector<int> overlapped(kDraws, -1);
  {
    scheduler::AsyncStepQueue queue(group.get());
    for (int draw = 0; draw < kDraws; ++draw) {
      masked_plans.push_back(DrawPlan(step_id++, draw, /*last_token=*/0));
      masked_plans.back().mutable_sequences(0)->set_input_from_last_sample(draw > 0);
      queue.Submit(masked_plans.back(), [&, draw] {
        if (draw > 0) read[draw - 1].WaitForNotificationWithTimeout(absl::Seconds(60));
        const int last = draw == 0 ? 0 : overlapped[draw - 1];
        return MasksFor(masked_plans[draw], MaskOfDraw(draw + last));
      });
    }
    for (int draw = 0; draw < kDraws; ++draw) {
      absl::StatusOr<v1::StepResult> result = queue.WaitOldest();
      EXPECT_TRUE(result.ok() && result->tokens_size() == 1) << draw << ": " << result.status();
      if (result.ok() && result->tokens_size() == 1) overlapped[draw] = result->tokens(0).token_id();
      read[draw].Notify();
    }
  }
  EXPECT_EQ(overlapped, masked_one_at_a_time);
  EXPECT_TRUE(group->Healthy());
}

}  // namespace
}  // namespace pagoda::worker
