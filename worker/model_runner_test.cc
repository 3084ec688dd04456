// The CPU ModelRunner end to end on a tiny random model: lifecycle errors,
// malformed plans rejected whole (INVALID_ARGUMENT, nothing executed), block
// moves (swap out/in, copy-on-write) preserving what attention reads, and
// sampling independent of the rest of the batch.

#include "worker/model_runner.h"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/fakes/fault_injecting_backend.h"
#include "worker/cpu/cpu_model_runner.h"
#include "worker/step_execution.h"

namespace pagoda::worker {
namespace {

using pagoda::worker::v1::InitCacheRequest;
using pagoda::worker::v1::LoadModelRequest;
using pagoda::worker::v1::SequenceStep;
using pagoda::worker::v1::StepPlan;
using pagoda::worker::v1::StepResult;

constexpr int kBlockSize = 4;
constexpr int kGpuBlocks = 12;
constexpr int kCpuBlocks = 4;
constexpr int kVocab = 50;
// 2 layers, 2 kv heads, head_dim 8: bytes of one block, K and V, f32.
constexpr int64_t kBytesPerBlock = 2 * 2 * 2 * kBlockSize * 8 * 4;

std::string Env(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

class ModelRunnerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char pattern[] = "/tmp/pagoda_runner_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = new std::string(pattern);
    const std::string command = absl::StrCat(
        Env("PAGODA_PYTHON3", "/usr/bin/python3"), " ", Env("PAGODA_SOURCE_DIR", "."),
        "/scripts/make_tiny_model.py --out ", *dir_, "/model --arch llama --vocab-size ", kVocab,
        " --hidden-size 32 --intermediate-size 48 --num-layers 2 --num-heads 4 --num-kv-heads 2"
        " --max-position-embeddings 64 --dtype f32 --seed 5 > /dev/null");
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }

  static std::string ModelDir() { return *dir_ + "/model"; }

  static LoadModelRequest LoadRequest() {
    LoadModelRequest request;
    request.set_model_dir(ModelDir());
    request.set_block_size(kBlockSize);
    request.set_device("cpu");
    request.set_world_size(1);
    request.set_kv_cache_memory_bytes(kBytesPerBlock * 20 + 7);
    return request;
  }

  // A runner with the model loaded and kGpuBlocks / kCpuBlocks of cache.
  static std::unique_ptr<ModelRunner> ReadyRunner() {
    auto runner = CreateCpuModelRunner();
    EXPECT_TRUE(runner->LoadModel(LoadRequest()).ok());
    InitCacheRequest init;
    init.set_num_gpu_blocks(kGpuBlocks);
    init.set_num_cpu_blocks(kCpuBlocks);
    EXPECT_TRUE(runner->InitCache(init).ok());
    return runner;
  }

  static std::string* dir_;
};

std::string* ModelRunnerTest::dir_ = nullptr;

SequenceStep Step(int64_t seq_id, std::vector<int> tokens, int start, std::vector<int> block_table,
                  bool sample = true) {
  SequenceStep step;
  step.set_seq_id(seq_id);
  for (int t : tokens) step.add_token_ids(t);
  step.set_start_position(start);
  for (int b : block_table) step.add_block_table(b);
  step.set_do_sample(sample);
  step.mutable_sampling()->set_num_logprobs(3);
  return step;
}

StepPlan Plan(std::vector<SequenceStep> steps) {
  StepPlan plan;
  for (auto& step : steps) *plan.add_sequences() = std::move(step);
  return plan;
}

StepResult MustRun(ModelRunner& runner, const StepPlan& plan) {
  auto result = runner.ExecuteStep(plan);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *result : StepResult();
}

const std::vector<int> kPrompt = {5, 17, 3, 42, 8, 11};  // 6 tokens: 2 blocks, last half full.

TEST_F(ModelRunnerTest, LoadModelReportsBlocksThatFit) {
  auto runner = CreateCpuModelRunner();
  auto response = runner->LoadModel(LoadRequest());
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->bytes_per_block(), kBytesPerBlock);
  EXPECT_EQ(response->num_gpu_blocks(), 20);
  EXPECT_EQ(response->vocab_size(), kVocab);
}

TEST_F(ModelRunnerTest, LifecycleErrors) {
  auto runner = CreateCpuModelRunner();
  InitCacheRequest init;
  init.set_num_gpu_blocks(4);
  EXPECT_EQ(runner->InitCache(init).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(runner->ExecuteStep(StepPlan()).status().code(), absl::StatusCode::kFailedPrecondition);

  LoadModelRequest bad = LoadRequest();
  bad.set_block_size(0);
  EXPECT_EQ(runner->LoadModel(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = LoadRequest();
  bad.set_kv_cache_memory_bytes(0);
  EXPECT_EQ(runner->LoadModel(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = LoadRequest();
  bad.set_device("cuda");
  EXPECT_EQ(runner->LoadModel(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = LoadRequest();
  bad.set_model_dir(*dir_ + "/missing");
  EXPECT_FALSE(runner->LoadModel(bad).ok());

  ASSERT_TRUE(runner->LoadModel(LoadRequest()).ok());
  EXPECT_EQ(runner->ExecuteStep(StepPlan()).status().code(), absl::StatusCode::kFailedPrecondition);
  init.set_num_gpu_blocks(0);
  EXPECT_EQ(runner->InitCache(init).code(), absl::StatusCode::kInvalidArgument);
}

// A copy of the test model whose config.json is edited by `python_edit`
// (Python statements over the dict `c`), so the weights no longer match.
std::string EditedModel(const std::string& base, const std::string& name,
                        const std::string& python_edit) {
  const std::string dir = base + "/" + name;
  std::filesystem::create_directories(dir);
  std::filesystem::copy(
      base + "/model", dir,
      std::filesystem::copy_options::overwrite_existing | std::filesystem::copy_options::recursive);
  const std::string command = absl::StrCat(
      Env("PAGODA_PYTHON3", "/usr/bin/python3"), " -c 'import json; p=\"", dir,
      "/config.json\"; c=json.load(open(p)); ", python_edit, "; json.dump(c, open(p, \"w\"))'");
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  return dir;
}

TEST_F(ModelRunnerTest, LoadModelBoundsDTypeThreadsAndWorkspace) {
  auto runner = CreateCpuModelRunner();
  LoadModelRequest bad = LoadRequest();
  bad.set_dtype("fp8");
  auto status = runner->LoadModel(bad).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("fp8"), std::string::npos) << status;
  for (int threads : {-1, 100000}) {
    bad = LoadRequest();
    bad.set_cpu_threads(threads);
    EXPECT_EQ(runner->LoadModel(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << threads;
  }
  bad = LoadRequest();
  bad.set_max_num_batched_tokens(2000000000);
  EXPECT_EQ(runner->LoadModel(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = LoadRequest();
  bad.set_max_num_seqs(-3);
  EXPECT_EQ(runner->LoadModel(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = LoadRequest();
  bad.set_cpu_weight_only_activations("int4");
  status = runner->LoadModel(bad).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("cpu_weight_only_activations"), std::string::npos) << status;
  for (const char* kv : {"fp8_e4m2", "half", "float", "BF16"}) {
    bad = LoadRequest();
    bad.set_kv_cache_dtype(kv);
    status = runner->LoadModel(bad).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << kv;
    EXPECT_NE(status.message().find("kv cache dtype"), std::string::npos) << status;
  }
}

// A 2-byte KV cache halves bytes_per_block, so the same memory holds twice
// the blocks, and an FP8 one (1 byte) twice those of bf16 again; "auto" on
// CPU is f32.
TEST_F(ModelRunnerTest, KvCacheDTypeSetsBytesPerBlock) {
  auto blocks = [&](const std::string& kv) -> std::pair<int64_t, int> {
    auto runner = CreateCpuModelRunner();
    LoadModelRequest load = LoadRequest();
    load.set_kv_cache_dtype(kv);
    auto response = runner->LoadModel(load);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? std::pair{response->bytes_per_block(), response->num_gpu_blocks()}
                         : std::pair<int64_t, int>{0, 0};
  };
  EXPECT_EQ(blocks(""), std::pair(kBytesPerBlock, 20));
  EXPECT_EQ(blocks("auto"), std::pair(kBytesPerBlock, 20));
  EXPECT_EQ(blocks("float32"), std::pair(kBytesPerBlock, 20));
  EXPECT_EQ(blocks("bfloat16"), std::pair(kBytesPerBlock / 2, 40));
  EXPECT_EQ(blocks("float16"), std::pair(kBytesPerBlock / 2, 40));
  EXPECT_EQ(blocks("fp8"), std::pair(kBytesPerBlock / 4, 80));
  EXPECT_EQ(blocks("fp8_e4m3"), std::pair(kBytesPerBlock / 4, 80));
  EXPECT_EQ(blocks("fp8_e5m2"), std::pair(kBytesPerBlock / 4, 80));
}

// Weights forced to bf16 on three threads decode the same greedy tokens as
// f32 on one, for a model whose top logits are far apart (made so by the
// maker's initialisation); a different dtype or thread count is not a
// different model.
TEST_F(ModelRunnerTest, DTypeAndThreadCountKeepGreedyTokens) {
  auto greedy = [&](const std::string& dtype, int threads, const std::string& kv = "auto") {
    auto runner = CreateCpuModelRunner();
    LoadModelRequest load = LoadRequest();
    load.set_dtype(dtype);
    load.set_cpu_threads(threads);
    load.set_kv_cache_dtype(kv);
    EXPECT_TRUE(runner->LoadModel(load).ok());
    InitCacheRequest init;
    init.set_num_gpu_blocks(kGpuBlocks);
    EXPECT_TRUE(runner->InitCache(init).ok());
    StepPlan plan;
    SequenceStep* seq = plan.add_sequences();
    seq->set_seq_id(1);
    for (int t : {5, 17, 3, 41, 8, 22}) seq->add_token_ids(t);
    for (int b : {3, 7}) seq->add_block_table(b);
    seq->set_do_sample(true);
    auto result = runner->ExecuteStep(plan);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() && result->tokens_size() == 1 ? result->tokens(0).token_id() : -1;
  };
  const int f32 = greedy("float32", 1);
  EXPECT_GE(f32, 0);
  EXPECT_EQ(greedy("auto", 3), f32);
  EXPECT_EQ(greedy("bfloat16", 3), f32);
  EXPECT_EQ(greedy("float16", 2), f32);
  // So does a 16-bit KV cache (the prompt's second block is read from it).
  EXPECT_EQ(greedy("float32", 2, "bfloat16"), f32);
  EXPECT_EQ(greedy("bfloat16", 1, "float16"), f32);
  EXPECT_EQ(greedy("float32", 2, "fp8"), f32);
}

TEST_F(ModelRunnerTest, MissingOrMisshapedWeightsNameTheTensor) {
  LoadModelRequest request = LoadRequest();
  // The model has its own lm_head; claiming more layers asks for tensors
  // that are not there.
  request.set_model_dir(EditedModel(*dir_, "more_layers", "c[\"num_hidden_layers\"] = 3"));
  auto loaded = CreateCpuModelRunner()->LoadModel(request);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("model.layers.2."), std::string::npos)
      << loaded.status();

  request.set_model_dir(EditedModel(*dir_, "wider_mlp", "c[\"intermediate_size\"] = 64"));
  loaded = CreateCpuModelRunner()->LoadModel(request);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("mlp.gate_proj.weight"), std::string::npos)
      << loaded.status();
}

TEST_F(ModelRunnerTest, MalformedPlansAreInvalidArgumentNamingTheSequence) {
  auto runner = ReadyRunner();
  struct Case {
    std::string what;
    StepPlan plan;
    std::string message;  // Must appear in the error.
  };
  std::vector<Case> cases;
  cases.push_back({"block id too large", Plan({Step(7, kPrompt, 0, {0, kGpuBlocks})}), "seq_id 7"});
  cases.push_back({"negative block id", Plan({Step(8, kPrompt, 0, {-1, 2})}), "seq_id 8"});
  cases.push_back({"table too short", Plan({Step(9, kPrompt, 0, {0})}), "seq_id 9"});
  cases.push_back({"table too short for start", Plan({Step(9, {1}, 8, {0, 1})}), "seq_id 9"});
  cases.push_back({"token id >= vocab", Plan({Step(10, {1, kVocab}, 0, {0})}), "seq_id 10"});
  cases.push_back({"negative token id", Plan({Step(11, {-3}, 0, {0})}), "seq_id 11"});
  cases.push_back({"empty tokens", Plan({Step(12, {}, 0, {0})}), "seq_id 12"});
  cases.push_back({"negative start", Plan({Step(13, {1}, -1, {0})}), "seq_id 13"});
  cases.push_back(
      {"duplicate seq_id", Plan({Step(14, {1}, 0, {0}), Step(14, {2}, 0, {1})}), "seq_id 14"});
  StepPlan logprobs = Plan({Step(15, {1}, 0, {0})});
  logprobs.mutable_sequences(0)->mutable_sampling()->set_num_logprobs(21);
  cases.push_back({"too many logprobs", logprobs, "seq_id 15"});
  StepPlan top_p = Plan({Step(16, {1}, 0, {0})});
  top_p.mutable_sequences(0)->mutable_sampling()->set_top_p(1.5f);
  cases.push_back({"top_p above 1", top_p, "seq_id 16"});
  StepPlan swap_in = Plan({Step(17, {1}, 0, {0})});
  auto* move = swap_in.add_swap_in();
  move->set_src(kCpuBlocks);
  move->set_dst(0);
  cases.push_back({"swap_in source out of range", swap_in, "swap_in"});
  StepPlan copy = Plan({});
  move = copy.add_copy();
  move->set_src(0);
  move->set_dst(kGpuBlocks);
  cases.push_back({"copy destination out of range", copy, "copy"});

  for (const Case& c : cases) {
    auto result = runner->ExecuteStep(c.plan);
    ASSERT_FALSE(result.ok()) << c.what;
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(result.status().message().find(c.message), std::string::npos)
        << c.what << ": " << result.status();
  }
}

TEST_F(ModelRunnerTest, ResultFollowsPlanOrderAndSkipsUnsampled) {
  auto runner = ReadyRunner();
  StepPlan plan = Plan({Step(30, {1, 2}, 0, {3}), Step(20, {4, 5, 6}, 0, {1}, /*sample=*/false),
                        Step(10, {7}, 0, {8})});
  plan.set_step_id(42);
  const StepResult result = MustRun(*runner, plan);
  EXPECT_EQ(result.step_id(), 42);
  ASSERT_EQ(result.tokens_size(), 2);
  EXPECT_EQ(result.tokens(0).seq_id(), 30);
  EXPECT_EQ(result.tokens(1).seq_id(), 10);
  EXPECT_EQ(result.tokens(0).top_size(), 3);
  EXPECT_GT(result.forward_seconds(), 0.0);
  // An empty plan is a valid no-op.
  EXPECT_EQ(MustRun(*runner, StepPlan()).tokens_size(), 0);
}

TEST_F(ModelRunnerTest, RejectedPlanLeavesCacheUntouched) {
  // Reference: prefill then decode with nothing in between.
  auto clean = ReadyRunner();
  MustRun(*clean, Plan({Step(1, kPrompt, 0, {2, 5})}));
  const StepResult expected = MustRun(*clean, Plan({Step(1, {9}, 6, {2, 5})}));

  auto runner = ReadyRunner();
  MustRun(*runner, Plan({Step(1, kPrompt, 0, {2, 5})}));
  // Valid parts (a copy over block 5, a write into block 2's slots) next to
  // an invalid sequence: the whole plan must be refused before any of it runs.
  StepPlan bad = Plan({Step(2, {1, 2, 3, 4}, 0, {2}), Step(3, {kVocab + 1}, 0, {0})});
  auto* move = bad.add_copy();
  move->set_src(0);
  move->set_dst(5);
  ASSERT_EQ(runner->ExecuteStep(bad).status().code(), absl::StatusCode::kInvalidArgument);
  const StepResult actual = MustRun(*runner, Plan({Step(1, {9}, 6, {2, 5})}));
  ASSERT_EQ(actual.tokens_size(), 1);
  EXPECT_EQ(actual.tokens(0).token_id(), expected.tokens(0).token_id());
  EXPECT_EQ(actual.tokens(0).logprob(), expected.tokens(0).logprob());
}

TEST_F(ModelRunnerTest, SwapOutAndBackInPreservesContext) {
  auto clean = ReadyRunner();
  MustRun(*clean, Plan({Step(1, kPrompt, 0, {2, 5})}));
  const StepResult expected = MustRun(*clean, Plan({Step(1, {9}, 6, {2, 5})}));

  auto runner = ReadyRunner();
  MustRun(*runner, Plan({Step(1, kPrompt, 0, {2, 5})}));
  StepPlan swap_out;
  auto* move = swap_out.add_swap_out();
  move->set_src(2);
  move->set_dst(3);
  move = swap_out.add_swap_out();
  move->set_src(5);
  move->set_dst(0);
  MustRun(*runner, swap_out);
  // Another sequence now overwrites the vacated blocks.
  MustRun(*runner, Plan({Step(2, {1, 2, 3, 4, 5, 6, 7, 8}, 0, {5, 2})}));
  // Swap back in to different blocks and decode there.
  StepPlan decode = Plan({Step(1, {9}, 6, {7, 10})});
  move = decode.add_swap_in();
  move->set_src(3);
  move->set_dst(7);
  move = decode.add_swap_in();
  move->set_src(0);
  move->set_dst(10);
  const StepResult actual = MustRun(*runner, decode);
  ASSERT_EQ(actual.tokens_size(), 1);
  EXPECT_EQ(actual.tokens(0).token_id(), expected.tokens(0).token_id());
  EXPECT_EQ(actual.tokens(0).logprob(), expected.tokens(0).logprob());
}

TEST_F(ModelRunnerTest, CopyOnWriteForkDecodesLikeParent) {
  auto runner = ReadyRunner();
  MustRun(*runner, Plan({Step(1, kPrompt, 0, {2, 5})}));
  // Fork: the child shares block 2 and gets a copy of the half-full block 5.
  StepPlan decode = Plan({Step(1, {9}, 6, {2, 5}), Step(2, {9}, 6, {2, 11})});
  auto* move = decode.add_copy();
  move->set_src(5);
  move->set_dst(11);
  const StepResult result = MustRun(*runner, decode);
  ASSERT_EQ(result.tokens_size(), 2);
  EXPECT_EQ(result.tokens(0).token_id(), result.tokens(1).token_id());
  EXPECT_NEAR(result.tokens(0).logprob(), result.tokens(1).logprob(), 1e-5);
  // Diverge: each writes a different token into its own last block.
  const StepResult next =
      MustRun(*runner, Plan({Step(1, {3}, 7, {2, 5}), Step(2, {4}, 7, {2, 11})}));
  auto alone = ReadyRunner();
  MustRun(*alone, Plan({Step(2, kPrompt, 0, {0, 1})}));
  MustRun(*alone, Plan({Step(2, {9}, 6, {0, 1})}));
  const StepResult child = MustRun(*alone, Plan({Step(2, {4}, 7, {0, 1})}));
  EXPECT_EQ(next.tokens(1).token_id(), child.tokens(0).token_id());
  EXPECT_NEAR(next.tokens(1).logprob(), child.tokens(0).logprob(), 1e-5);
}

TEST_F(ModelRunnerTest, SeededSamplingIndependentOfBatch) {
  auto sample = [](ModelRunner& runner, std::vector<SequenceStep> steps) {
    for (auto& step : steps) {
      step.mutable_sampling()->set_temperature(1.0f);
      step.mutable_sampling()->set_seed(1000 + step.seq_id());
      step.set_sample_index(3);
    }
    return MustRun(runner, Plan(std::move(steps)));
  };
  auto alone = ReadyRunner();
  const StepResult single = sample(*alone, {Step(1, kPrompt, 0, {0, 1})});
  auto batched = ReadyRunner();
  const StepResult many = sample(
      *batched, {Step(4, {8, 8, 8}, 0, {6}), Step(3, {1}, 0, {7}), Step(1, kPrompt, 0, {9, 2})});
  ASSERT_EQ(many.tokens_size(), 3);
  EXPECT_EQ(many.tokens(2).seq_id(), 1);
  EXPECT_EQ(many.tokens(2).token_id(), single.tokens(0).token_id());
  EXPECT_NEAR(many.tokens(2).logprob(), single.tokens(0).logprob(), 1e-5);
}

// Sampling runs once for the whole step, computing the most top logprobs any
// row asked for; each token still carries exactly its own count.
TEST_F(ModelRunnerTest, EachTokenGetsTheTopLogprobsItAskedFor) {
  auto runner = ReadyRunner();
  std::vector<SequenceStep> steps = {Step(1, kPrompt, 0, {0, 1}), Step(2, {8, 8}, 0, {6}),
                                     Step(3, {1}, 0, {7})};
  const int asked[] = {0, 5, 2};
  for (int i = 0; i < 3; ++i) steps[i].mutable_sampling()->set_num_logprobs(asked[i]);
  const StepResult result = MustRun(*runner, Plan(std::move(steps)));
  ASSERT_EQ(result.tokens_size(), 3);
  for (int i = 0; i < 3; ++i) {
    const auto& token = result.tokens(i);
    ASSERT_EQ(token.top_size(), asked[i]) << "sequence " << token.seq_id();
    for (int j = 1; j < token.top_size(); ++j) {
      EXPECT_GE(token.top(j - 1).logprob(), token.top(j).logprob());
    }
    if (token.top_size() > 0) {
      EXPECT_EQ(token.top(0).token_id(), token.token_id());  // Greedy.
      EXPECT_EQ(token.top(0).logprob(), token.logprob());
    }
  }
}

// A backend's sticky error after a valid plan is a fault of the worker
// (INTERNAL, whatever code the backend stored), and it stays: every later
// step fails too, so only a new runner (the server's restart) clears it. A
// malformed plan stays INVALID_ARGUMENT.
TEST_F(ModelRunnerTest, BackendFaultIsInternalAndStickyWhileBadPlansStayInvalidArgument) {
  auto runner = CreateCpuModelRunner(
      CpuModelRunnerOptions{.wrap_backend = [](std::unique_ptr<Backend> backend) {
        return pagoda::testing::WrapWithFaults(std::move(backend), {.fail_at_step = 2});
      }});
  ASSERT_TRUE(runner->LoadModel(LoadRequest()).ok());
  InitCacheRequest init;
  init.set_num_gpu_blocks(kGpuBlocks);
  init.set_num_cpu_blocks(kCpuBlocks);
  ASSERT_TRUE(runner->InitCache(init).ok());

  MustRun(*runner, Plan({Step(1, {1, 2, 3}, 0, {0})}));
  EXPECT_EQ(runner->ExecuteStep(Plan({Step(1, {kVocab}, 3, {0})})).status().code(),
            absl::StatusCode::kInvalidArgument);  // Refused before the backend runs.
  auto faulted = runner->ExecuteStep(Plan({Step(1, {4}, 3, {0})}));
  EXPECT_EQ(faulted.status().code(), absl::StatusCode::kInternal) << faulted.status();
  EXPECT_NE(faulted.status().message().find("INVALID_ARGUMENT"), std::string::npos);
  EXPECT_EQ(runner->ExecuteStep(Plan({Step(1, {4}, 3, {0})})).status().code(),
            absl::StatusCode::kInternal);
}

TEST(AsWorkerFaultTest, RequestCodesBecomeInternalFaultCodesStay) {
  EXPECT_TRUE(AsWorkerFault(absl::OkStatus()).ok());
  EXPECT_EQ(AsWorkerFault(absl::ResourceExhaustedError("oom")).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(AsWorkerFault(absl::InvalidArgumentError("x")).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(AsWorkerFault(absl::AbortedError("peer")).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(AsWorkerFault(absl::UnavailableError("peer")).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace pagoda::worker
