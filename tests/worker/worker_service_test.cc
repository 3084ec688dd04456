// Drives real pagoda-worker processes over loopback gRPC through the server's
// WorkerGroup, and checks their answers against the same model run in-process.

#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_health.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "scheduler/workers/grpc_worker_group.h"
#include "scheduler/workers/worker_group.h"
#include "scheduler/workers/worker_launcher.h"
#include "wire/frame_channel.h"
#include "wire/worker_owner.h"
#include "wire/worker_secret.h"
#include "worker/cpu/cpu_model_runner.h"
#include "worker/model_runner.h"

extern char** environ;

namespace pagoda::worker {
namespace {

namespace v1 = ::pagoda::worker::v1;
using ::pagoda::scheduler::GrpcWorkerGroup;
using ::pagoda::scheduler::WorkerGroup;
using ::pagoda::scheduler::WorkerProcess;

constexpr absl::Duration kStartTimeout = absl::Seconds(20);
constexpr int kBlockSize = 4;
constexpr int kVocabSize = 64;

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

// True once `pid` is stopped (state T in /proc/pid/stat): a stop signal
// takes effect only when the kernel next runs the process.
bool ProcessIsStopped(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(stat, line);
  const size_t name_end = line.rfind(')');  // The command name may hold spaces.
  return name_end != std::string::npos && name_end + 2 < line.size() && line[name_end + 2] == 'T';
}

// True once `pid` is no process at all: reaped, not merely a zombie.
bool ProcessIsGone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

class WorkerServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char dir_template[] = "/tmp/pagoda_worker_service_test_XXXXXX";
    ASSERT_NE(mkdtemp(dir_template), nullptr);
    temp_dir_ = new std::string(dir_template);
    model_dir_ = new std::string(*temp_dir_ + "/model");
    const std::string command = absl::StrCat(
        EnvOr("PAGODA_PYTHON3", "/usr/bin/python3"), " ", EnvOr("PAGODA_SOURCE_DIR", "."),
        "/scripts/make_tiny_model.py --out ", *model_dir_, " --vocab-size ", kVocabSize,
        " --hidden-size 32 --intermediate-size 64 --num-layers 2 --num-heads 4"
        " --num-kv-heads 2 --dtype f32 > /dev/null");
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*temp_dir_);
    delete temp_dir_;
    delete model_dir_;
  }

  static v1::LoadModelRequest LoadRequest(const std::string& model_dir) {
    v1::LoadModelRequest request;
    request.set_model_dir(model_dir);
    request.set_block_size(kBlockSize);
    request.set_device("cpu");
    request.set_kv_cache_memory_bytes(1 << 20);
    request.set_max_num_batched_tokens(64);
    request.set_max_num_seqs(4);
    return request;
  }

  static v1::InitCacheRequest CacheRequest() {
    v1::InitCacheRequest request;
    request.set_num_gpu_blocks(16);
    request.set_num_cpu_blocks(4);
    return request;
  }

  // One greedy step of one sequence whose context fits in `block_table`.
  static v1::StepPlan Step(int64_t step_id, int64_t seq_id, std::vector<int> tokens,
                           int start_position, std::vector<int> block_table) {
    v1::StepPlan plan;
    plan.set_step_id(step_id);
    v1::SequenceStep* sequence = plan.add_sequences();
    sequence->set_seq_id(seq_id);
    for (int token : tokens) sequence->add_token_ids(token);
    sequence->set_start_position(start_position);
    for (int block : block_table) sequence->add_block_table(block);
    sequence->set_do_sample(true);
    sequence->mutable_sampling()->set_num_logprobs(3);
    return plan;
  }

  // Launches one worker and brings it to the point where it runs steps.
  static std::unique_ptr<WorkerGroup> ReadyWorker() {
    auto group = scheduler::LaunchLocalWorkers(PAGODA_WORKER_BINARY, 1, kStartTimeout);
    EXPECT_TRUE(group.ok()) << group.status();
    if (!group.ok()) return nullptr;
    auto loaded = (*group)->LoadModel(LoadRequest(*model_dir_));
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    absl::Status cache = (*group)->InitCache(CacheRequest());
    EXPECT_TRUE(cache.ok()) << cache;
    return *std::move(group);
  }

  static std::string* temp_dir_;
  static std::string* model_dir_;
};

std::string* WorkerServiceTest::temp_dir_ = nullptr;
std::string* WorkerServiceTest::model_dir_ = nullptr;

TEST_F(WorkerServiceTest, PrefillAndDecodeThroughTheProcessMatchInProcessRunner) {
  auto group = scheduler::LaunchLocalWorkers(PAGODA_WORKER_BINARY, 1, kStartTimeout);
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ((*group)->world_size(), 1);
  std::unique_ptr<ModelRunner> local = CreateCpuModelRunner();

  auto remote_loaded = (*group)->LoadModel(LoadRequest(*model_dir_));
  ASSERT_TRUE(remote_loaded.ok()) << remote_loaded.status();
  auto local_loaded = local->LoadModel(LoadRequest(*model_dir_));
  ASSERT_TRUE(local_loaded.ok()) << local_loaded.status();
  EXPECT_EQ(remote_loaded->vocab_size(), kVocabSize);
  EXPECT_GT(remote_loaded->num_gpu_blocks(), 16);
  EXPECT_EQ(remote_loaded->num_gpu_blocks(), local_loaded->num_gpu_blocks());
  EXPECT_EQ(remote_loaded->bytes_per_block(), local_loaded->bytes_per_block());

  ASSERT_TRUE((*group)->InitCache(CacheRequest()).ok());
  ASSERT_TRUE(local->InitCache(CacheRequest()).ok());

  // Prefill 5 prompt tokens into blocks {3, 7}, then decode 3 tokens, feeding
  // back what the worker sampled.
  std::vector<int> tokens = {5, 17, 33, 2, 60};
  const std::vector<int> block_table = {3, 7};
  int position = 0;
  std::vector<int> generated;
  for (int step = 0; step < 4; ++step) {
    v1::StepPlan plan = Step(step, 42, tokens, position, block_table);
    plan.mutable_sequences(0)->mutable_sampling()->set_temperature(0.8f);  // Seeded draws.
    plan.mutable_sequences(0)->mutable_sampling()->set_seed(9);
    // The process gets block-table deltas and unchanged sampling options
    // after the prefill (the step channel resolves them against its
    // previous step); the runner the whole plan.
    v1::StepPlan sent = plan;
    if (step > 0) {
      sent.mutable_sequences(0)->set_block_table_start(1);
      sent.mutable_sequences(0)->mutable_block_table()->erase(
          sent.mutable_sequences(0)->mutable_block_table()->begin());
      sent.mutable_sequences(0)->clear_sampling();
      sent.mutable_sequences(0)->set_sampling_unchanged(true);
    }
    auto remote = (*group)->ExecuteStep(sent);
    ASSERT_TRUE(remote.ok()) << remote.status();
    auto expected = local->ExecuteStep(plan);
    ASSERT_TRUE(expected.ok()) << expected.status();
    EXPECT_EQ(remote->step_id(), step);
    EXPECT_GT(remote->forward_seconds(), 0);
    ASSERT_EQ(remote->tokens_size(), 1);
    const v1::SampledToken& token = remote->tokens(0);
    EXPECT_EQ(token.seq_id(), 42);
    EXPECT_GE(token.token_id(), 0);
    EXPECT_LT(token.token_id(), kVocabSize);
    EXPECT_EQ(token.token_id(), expected->tokens(0).token_id());
    EXPECT_FLOAT_EQ(token.logprob(), expected->tokens(0).logprob());
    EXPECT_EQ(token.top_size(), 3);
    position += static_cast<int>(tokens.size());
    tokens = {token.token_id()};
    generated.push_back(token.token_id());
  }
  EXPECT_EQ(generated.size(), 4u);
  EXPECT_TRUE((*group)->Healthy());
  (*group)->Shutdown();
  EXPECT_FALSE((*group)->Healthy());
}

TEST_F(WorkerServiceTest, MalformedPlanIsInvalidArgumentAndWorkerKeepsServing) {
  std::unique_ptr<WorkerGroup> group = ReadyWorker();
  ASSERT_NE(group, nullptr);
  auto bad_block = group->ExecuteStep(Step(1, 1, {1, 2, 3}, 0, {100000}));
  EXPECT_EQ(bad_block.status().code(), absl::StatusCode::kInvalidArgument) << bad_block.status();
  auto bad_token = group->ExecuteStep(Step(2, 1, {kVocabSize + 5}, 0, {0}));
  EXPECT_EQ(bad_token.status().code(), absl::StatusCode::kInvalidArgument) << bad_token.status();
  EXPECT_TRUE(group->Healthy());

  auto good = group->ExecuteStep(Step(3, 1, {1, 2, 3}, 0, {0}));
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->tokens_size(), 1);
  EXPECT_TRUE(group->Healthy());

  // Block-table deltas extend only the step before, and none after a refusal.
  auto delta = [](int64_t step_id, int start) {
    v1::StepPlan plan = Step(step_id, 1, {4}, 3, {});
    plan.mutable_sequences(0)->set_block_table_start(start);
    return plan;
  };
  EXPECT_TRUE(group->ExecuteStep(delta(4, 1)).ok());
  EXPECT_EQ(group->ExecuteStep(delta(6, 1)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(group->ExecuteStep(delta(7, 1)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(group->ExecuteStep(Step(8, 1, {4}, 3, {0})).ok());
  // So do unchanged sampling options, and never beside options given.
  auto unchanged = [](int64_t step_id, bool with_options) {
    v1::StepPlan plan = Step(step_id, 1, {4}, 3, {0});
    if (!with_options) plan.mutable_sequences(0)->clear_sampling();
    plan.mutable_sequences(0)->set_sampling_unchanged(true);
    return plan;
  };
  auto repeated = group->ExecuteStep(unchanged(9, false));
  ASSERT_TRUE(repeated.ok()) << repeated.status();
  EXPECT_EQ(repeated->tokens(0).top_size(), 3);  // Step 8's num_logprobs.
  EXPECT_EQ(group->ExecuteStep(unchanged(10, true)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(group->ExecuteStep(unchanged(11, false)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(group->Healthy());
}

TEST_F(WorkerServiceTest, StepBeforeLoadIsFailedPrecondition) {
  auto group = scheduler::LaunchLocalWorkers(PAGODA_WORKER_BINARY, 1, kStartTimeout);
  ASSERT_TRUE(group.ok()) << group.status();
  auto step = (*group)->ExecuteStep(Step(0, 1, {1}, 0, {0}));
  EXPECT_EQ(step.status().code(), absl::StatusCode::kFailedPrecondition) << step.status();
  EXPECT_EQ((*group)->InitCache(CacheRequest()).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*group)->Healthy());
}

TEST_F(WorkerServiceTest, LoadModelFromBadDirectoryIsAClearErrorNotACrash) {
  auto group = scheduler::LaunchLocalWorkers(PAGODA_WORKER_BINARY, 1, kStartTimeout);
  ASSERT_TRUE(group.ok()) << group.status();
  const std::string missing = *temp_dir_ + "/no_such_model";
  auto loaded = (*group)->LoadModel(LoadRequest(missing));
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().code(), absl::StatusCode::kUnavailable) << loaded.status();
  EXPECT_NE(loaded.status().message().find("no_such_model"), std::string::npos) << loaded.status();
  EXPECT_TRUE((*group)->Healthy());

  v1::LoadModelRequest unknown_device = LoadRequest(*model_dir_);
  unknown_device.set_device("tpu");
  EXPECT_EQ((*group)->LoadModel(unknown_device).status().code(),
            absl::StatusCode::kInvalidArgument);

  // The same process then loads a good model.
  auto good = (*group)->LoadModel(LoadRequest(*model_dir_));
  EXPECT_TRUE(good.ok()) << good.status();
}

TEST_F(WorkerServiceTest, KilledWorkerMakesGroupUnavailableFast) {
  std::unique_ptr<WorkerGroup> group = ReadyWorker();
  ASSERT_NE(group, nullptr);
  auto* grpc_group = dynamic_cast<GrpcWorkerGroup*>(group.get());
  ASSERT_NE(grpc_group, nullptr);
  ASSERT_EQ(grpc_group->worker_pids().size(), 1u);
  const pid_t pid = grpc_group->worker_pids()[0];
  ASSERT_TRUE(group->ExecuteStep(Step(0, 1, {1, 2}, 0, {0})).ok());

  ASSERT_EQ(kill(pid, SIGKILL), 0);
  const absl::Time killed = absl::Now();
  auto step = group->ExecuteStep(Step(1, 1, {3}, 2, {0}));
  EXPECT_LT(absl::Now() - killed, absl::Seconds(2));
  EXPECT_EQ(step.status().code(), absl::StatusCode::kUnavailable) << step.status();
  EXPECT_NE(step.status().message().find("rank 0"), std::string::npos) << step.status();
  EXPECT_FALSE(group->Healthy());

  // Every later call fails at once, without touching the network.
  const absl::Time later = absl::Now();
  EXPECT_EQ(group->ExecuteStep(Step(2, 1, {3}, 2, {0})).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(group->InitCache(CacheRequest()).code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(absl::Now() - later, absl::Milliseconds(100));
}

TEST_F(WorkerServiceTest, MonitorNoticesADeadWorkerWithoutAnyCall) {
  auto group = GrpcWorkerGroup::Launch(PAGODA_WORKER_BINARY, 1, kStartTimeout);
  ASSERT_TRUE(group.ok()) << group.status();
  ASSERT_TRUE((*group)->Healthy());
  ASSERT_EQ(kill((*group)->worker_pids()[0], SIGKILL), 0);
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  while ((*group)->Healthy() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_FALSE((*group)->Healthy());
  // The connection watcher may see the death first; the monitor reaps soon.
  const pid_t pid = (*group)->worker_pids()[0];
  while (!ProcessIsGone(pid) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_TRUE(ProcessIsGone(pid));  // Reaped by the monitor.
}

TEST_F(WorkerServiceTest, ShutdownReapsEveryWorker) {
  auto group = GrpcWorkerGroup::Launch(PAGODA_WORKER_BINARY, 2, kStartTimeout);
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ((*group)->world_size(), 2);
  const std::vector<pid_t> pids = (*group)->worker_pids();
  ASSERT_EQ(pids.size(), 2u);
  EXPECT_NE(pids[0], pids[1]);
  for (pid_t pid : pids) EXPECT_EQ(kill(pid, 0), 0);

  const absl::Time start = absl::Now();
  (*group)->Shutdown();
  // The workers left on the Shutdown RPC, well before the terminate grace.
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  for (pid_t pid : pids) {
    EXPECT_TRUE(ProcessIsGone(pid)) << pid;
    EXPECT_EQ(waitpid(pid, nullptr, WNOHANG), -1);  // Nothing left to reap.
  }
  EXPECT_FALSE((*group)->Healthy());
  EXPECT_EQ((*group)->ExecuteStep(Step(0, 1, {1}, 0, {0})).status().code(),
            absl::StatusCode::kUnavailable);
  (*group)->Shutdown();  // Idempotent.
}

TEST_F(WorkerServiceTest, WorkerStopsCleanlyOnSigterm) {
  std::string how;
  absl::Mutex mutex;
  auto process =
      WorkerProcess::Spawn(PAGODA_WORKER_BINARY, 0, kStartTimeout, [&](const std::string& exit) {
        absl::MutexLock lock(&mutex);
        how = exit;
      });
  ASSERT_TRUE(process.ok()) << process.status();
  EXPECT_TRUE(absl::StartsWith((*process)->address(), "unix:")) << (*process)->address();
  EXPECT_FALSE((*process)->Exited());
  (*process)->Terminate(absl::Seconds(5));
  EXPECT_TRUE((*process)->Exited());
  absl::MutexLock lock(&mutex);
  EXPECT_EQ(how, "exited with status 0");
}

TEST_F(WorkerServiceTest, ConnectWorkersReachesARunningWorker) {
  auto process = WorkerProcess::Spawn(PAGODA_WORKER_BINARY, 0, kStartTimeout, nullptr);
  ASSERT_TRUE(process.ok()) << process.status();
  auto group =
      scheduler::ConnectWorkers({(*process)->address()}, (*process)->secret(), absl::Seconds(5));
  ASSERT_TRUE(group.ok()) << group.status();
  auto loaded = (*group)->LoadModel(LoadRequest(*model_dir_));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->vocab_size(), kVocabSize);
  // Shutting the group down stops the remote worker through the RPC alone.
  (*group)->Shutdown();
  EXPECT_TRUE((*process)->WaitForExit(absl::Seconds(3)));
}

TEST_F(WorkerServiceTest, WorkerAnswersStandardHealthChecks) {
  auto process = WorkerProcess::Spawn(PAGODA_WORKER_BINARY, 0, kStartTimeout, nullptr);
  ASSERT_TRUE(process.ok()) << process.status();
  auto channel = grpc::CreateChannel((*process)->address(), grpc::InsecureChannelCredentials());
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  int serving_status = -1;
  const grpc::Status status = pagoda::CheckHealth(channel, context, &serving_status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(serving_status, 1);  // SERVING.
}

TEST_F(WorkerServiceTest, ConnectWorkersToAClosedPortIsUnavailableWithinTheTimeout) {
  // Bind a port, then close it: nothing listens there.
  const int socket_fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(socket_fd, 0);
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(socket_fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(socket_fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  close(socket_fd);

  const absl::Time start = absl::Now();
  auto group = scheduler::ConnectWorkers({absl::StrCat("127.0.0.1:", ntohs(address.sin_port))},
                                         "a-secret-of-enough-bytes", absl::Milliseconds(800));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(group.status().code(), absl::StatusCode::kUnavailable) << group.status();
}

TEST_F(WorkerServiceTest, LaunchFailsCleanlyForAMissingBinary) {
  auto group = scheduler::LaunchLocalWorkers(*temp_dir_ + "/no_such_binary", 1, kStartTimeout);
  EXPECT_EQ(group.status().code(), absl::StatusCode::kUnavailable) << group.status();
}

// The step channel a spawned worker inherits, driven by hand: what is not a
// StepPlan is refused with a reply, a plan before LoadModel gets the same
// FAILED_PRECONDITION as over gRPC, and a length prefix past the bound closes
// the channel without taking the worker down.
TEST_F(WorkerServiceTest, StepChannelRefusesWhatIsNotAPlanAndSurvivesAnOversizedFrame) {
  auto process = WorkerProcess::Spawn(PAGODA_WORKER_BINARY, 0, kStartTimeout, nullptr);
  ASSERT_TRUE(process.ok()) << process.status();
  const int fd = (*process)->step_fd();
  ASSERT_GE(fd, 0);
  auto exchange = [&](absl::string_view payload) -> absl::StatusOr<v1::StepReply> {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    if (absl::Status sent = WriteFrame(fd, payload, deadline); !sent.ok()) return sent;
    std::string frame;
    if (absl::Status got = ReadFrame(fd, deadline, kMaxFrameBytes, &frame); !got.ok()) return got;
    v1::StepReply reply;
    if (!reply.ParseFromString(frame)) return absl::DataLossError("reply does not parse");
    return reply;
  };

  // 0xff starts a field tag whose varint never ends: not a protobuf message.
  auto garbage = exchange("\xff\xff\xff\xff");
  ASSERT_TRUE(garbage.ok()) << garbage.status();
  EXPECT_EQ(garbage->code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(garbage->has_result());

  auto early = exchange(kStepPlanFrame + Step(0, 1, {1}, 0, {0}).SerializeAsString());
  ASSERT_TRUE(early.ok()) << early.status();
  EXPECT_EQ(early->code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));

  // 2^40 bytes announced: the worker drops the channel rather than allocate.
  const unsigned char header[8] = {0, 0, 0, 0, 0, 1, 0, 0};
  ASSERT_EQ(write(fd, header, sizeof(header)), 8);
  std::string frame;
  EXPECT_EQ(ReadFrame(fd, absl::Now() + absl::Seconds(10), kMaxFrameBytes, &frame).code(),
            absl::StatusCode::kUnavailable);
  // The process and its gRPC endpoint live on.
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE((*process)->Exited());
}

// A spawned worker still serves ExecuteStep over gRPC (tensor-parallel groups
// and tools use it), giving what its step channel gives.
TEST_F(WorkerServiceTest, GrpcStepOfASpawnedWorkerMatchesItsStepChannel) {
  auto process = WorkerProcess::Spawn(PAGODA_WORKER_BINARY, 0, kStartTimeout, nullptr);
  ASSERT_TRUE(process.ok()) << process.status();
  auto channel = grpc::CreateChannel((*process)->address(), grpc::InsecureChannelCredentials());
  auto stub = v1::Worker::NewStub(channel);
  auto call = [&](auto method, const auto& request, auto* response) {
    grpc::ClientContext context;
    context.AddMetadata(kWorkerSecretMetadataKey, (*process)->secret());
    context.AddMetadata(wire::kWorkerOwnerMetadataKey, std::string(32, '7'));
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    return (stub.get()->*method)(&context, request, response);
  };
  v1::LoadModelResponse loaded;
  ASSERT_TRUE(call(&v1::Worker::Stub::LoadModel, LoadRequest(*model_dir_), &loaded).ok());
  v1::InitCacheResponse cached;
  ASSERT_TRUE(call(&v1::Worker::Stub::InitCache, CacheRequest(), &cached).ok());

  const v1::StepPlan prefill = Step(0, 7, {5, 17, 33}, 0, {1});
  v1::StepResult over_grpc;
  ASSERT_TRUE(call(&v1::Worker::Stub::ExecuteStep, prefill, &over_grpc).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  ASSERT_TRUE(
      WriteFrame((*process)->step_fd(), kStepPlanFrame + prefill.SerializeAsString(), deadline)
          .ok());
  std::string frame;
  ASSERT_TRUE(ReadFrame((*process)->step_fd(), deadline, kMaxFrameBytes, &frame).ok());
  v1::StepReply over_channel;
  ASSERT_TRUE(over_channel.ParseFromString(frame));
  ASSERT_EQ(over_channel.code(), 0) << over_channel.message();
  ASSERT_EQ(over_grpc.tokens_size(), 1);
  ASSERT_EQ(over_channel.result().tokens_size(), 1);
  EXPECT_EQ(over_channel.result().step_id(), 0);
  EXPECT_EQ(over_channel.result().tokens(0).token_id(), over_grpc.tokens(0).token_id());
  EXPECT_FLOAT_EQ(over_channel.result().tokens(0).logprob(), over_grpc.tokens(0).logprob());

  // gRPC resolves block-table deltas and unchanged options too (in a copy
  // of its const plan).
  v1::StepPlan decode = Step(1, 7, {over_grpc.tokens(0).token_id()}, 3, {});
  decode.mutable_sequences(0)->set_block_table_start(1);
  decode.mutable_sequences(0)->clear_sampling();
  decode.mutable_sequences(0)->set_sampling_unchanged(true);
  v1::StepResult decoded;
  ASSERT_TRUE(call(&v1::Worker::Stub::ExecuteStep, decode, &decoded).ok());
  ASSERT_EQ(decoded.tokens_size(), 1);
  EXPECT_EQ(decoded.tokens(0).top_size(), 3);  // The prefill's num_logprobs.
  decode.set_step_id(3);  // Step 2 never ran here: refused.
  EXPECT_EQ(call(&v1::Worker::Stub::ExecuteStep, decode, &decoded).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

// A worker that stops answering (SIGSTOP: alive, holding its channel open)
// fails the step at the group's step deadline, not never; the group recovers
// with a new worker and a new channel.
TEST_F(WorkerServiceTest, StoppedWorkerFailsTheStepAtItsDeadlineAndTheGroupRecovers) {
  scheduler::GrpcWorkerGroupOptions options;
  options.step_timeout = absl::Milliseconds(500);
  auto group = GrpcWorkerGroup::Launch(PAGODA_WORKER_BINARY, 1, kStartTimeout, options);
  ASSERT_TRUE(group.ok()) << group.status();
  ASSERT_TRUE((*group)->LoadModel(LoadRequest(*model_dir_)).ok());
  ASSERT_TRUE((*group)->InitCache(CacheRequest()).ok());
  ASSERT_TRUE((*group)->ExecuteStep(Step(0, 1, {1, 2}, 0, {0})).ok());

  const pid_t pid = (*group)->worker_pids().at(0);
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  for (int i = 0; i < 500 && !ProcessIsStopped(pid); ++i) absl::SleepFor(absl::Milliseconds(2));
  ASSERT_TRUE(ProcessIsStopped(pid));
  const absl::Time start = absl::Now();
  auto step = (*group)->ExecuteStep(Step(1, 1, {3}, 2, {0}));
  const absl::Duration waited = absl::Now() - start;
  kill(pid, SIGCONT);
  EXPECT_EQ(step.status().code(), absl::StatusCode::kUnavailable) << step.status();
  EXPECT_NE(step.status().message().find("deadline"), std::string::npos) << step.status();
  EXPECT_GE(waited, absl::Milliseconds(450));
  EXPECT_LT(waited, absl::Seconds(5));
  EXPECT_FALSE((*group)->Healthy());

  ASSERT_TRUE((*group)->Recover().ok());
  EXPECT_NE((*group)->worker_pids().at(0), pid);
  auto again = (*group)->ExecuteStep(Step(2, 1, {1, 2}, 0, {0}));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->tokens_size(), 1);
}

TEST_F(WorkerServiceTest, OrphanedWorkerExitsWhenItsParentDies) {
  // Become the subreaper so the orphan is re-parented to this test, which can
  // then wait for it.
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  // The shell starts the worker as its child, prints its pid, waits until it
  // serves (so the parent watch, not the start-up check, must catch the
  // orphaning) and exits.
  const std::string out = *temp_dir_ + "/orphan.out";
  const std::string script =
      absl::StrCat("echo a-secret-of-enough-bytes >", *temp_dir_, "/secret; chmod 600 ", *temp_dir_,
                   "/secret; ", PAGODA_WORKER_BINARY, " --listen 127.0.0.1:0 --secret-file ", *temp_dir_, "/secret --parent-pid $$ >",
                   out, " 2>/dev/null & echo $!; for i in $(seq 400); do grep -q LISTENING ", out,
                   " && break; sleep 0.05; done");
  FILE* shell = popen(script.c_str(), "r");
  ASSERT_NE(shell, nullptr);
  char line[64] = {};
  ASSERT_NE(fgets(line, sizeof(line), shell), nullptr);
  pclose(shell);
  pid_t worker = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &worker)) << line;

  // The worker notices within its watch period and exits 0.
  int status = -1;
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  pid_t reaped = 0;
  while ((reaped = waitpid(worker, &status, WNOHANG)) == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  if (reaped == 0) kill(worker, SIGKILL);
  ASSERT_EQ(reaped, worker) << "orphaned worker still running";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  prctl(PR_SET_CHILD_SUBREAPER, 0);
}

// Waits until `group` notices its failure by itself (no call in flight).
bool BecomesUnhealthy(const GrpcWorkerGroup& group) {
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  while (group.Healthy() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  return !group.Healthy();
}

TEST_F(WorkerServiceTest, RecoverRestartsTheWorkerAndReplaysModelAndCache) {
  auto group = GrpcWorkerGroup::Launch(PAGODA_WORKER_BINARY, 1, kStartTimeout);
  ASSERT_TRUE(group.ok()) << group.status();
  ASSERT_TRUE((*group)->LoadModel(LoadRequest(*model_dir_)).ok());
  ASSERT_TRUE((*group)->InitCache(CacheRequest()).ok());
  auto before = (*group)->ExecuteStep(Step(0, 1, {5, 6, 7}, 0, {0}));
  ASSERT_TRUE(before.ok()) << before.status();
  const pid_t old_pid = (*group)->worker_pids()[0];
  ASSERT_EQ(kill(old_pid, SIGKILL), 0);
  ASSERT_TRUE(BecomesUnhealthy(**group));
  ASSERT_TRUE((*group)->Recover().ok());
  EXPECT_TRUE((*group)->Healthy());
  EXPECT_EQ((*group)->restarts(), 1);
  EXPECT_NE((*group)->worker_pids()[0], old_pid);
  // The new worker has the model and a cache: the same step gives the same token.
  auto after = (*group)->ExecuteStep(Step(1, 1, {5, 6, 7}, 0, {0}));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->tokens(0).token_id(), before->tokens(0).token_id());
}

TEST_F(WorkerServiceTest, RecoverRestartsEveryRankTogether) {
  auto group = GrpcWorkerGroup::Launch(PAGODA_WORKER_BINARY, 2, kStartTimeout);
  ASSERT_TRUE(group.ok()) << group.status();
  const std::vector<pid_t> old_pids = (*group)->worker_pids();
  ASSERT_EQ(kill(old_pids[1], SIGKILL), 0);  // One rank dies...
  ASSERT_TRUE(BecomesUnhealthy(**group));
  ASSERT_TRUE((*group)->Recover().ok());
  const std::vector<pid_t> new_pids = (*group)->worker_pids();
  ASSERT_EQ(new_pids.size(), 2u);
  EXPECT_NE(new_pids[0], old_pids[0]);  // ...and both are restarted.
  EXPECT_NE(new_pids[1], old_pids[1]);
  EXPECT_TRUE(ProcessIsGone(old_pids[0]));
}

TEST_F(WorkerServiceTest, RecoverGivesUpAfterTheRestartLimitAndSaysWhy) {
  const std::string model_dir = *temp_dir_ + "/doomed_model";
  std::filesystem::copy(*model_dir_, model_dir, std::filesystem::copy_options::recursive);
  scheduler::GrpcWorkerGroupOptions options;
  options.max_restarts = 2;
  options.first_restart_backoff = absl::Milliseconds(10);
  auto group = GrpcWorkerGroup::Launch(PAGODA_WORKER_BINARY, 1, kStartTimeout, options);
  ASSERT_TRUE(group.ok()) << group.status();
  ASSERT_TRUE((*group)->LoadModel(LoadRequest(model_dir)).ok());
  std::filesystem::remove_all(model_dir);
  ASSERT_EQ(kill((*group)->worker_pids()[0], SIGKILL), 0);
  ASSERT_TRUE(BecomesUnhealthy(**group));
  const absl::Status recovered = (*group)->Recover();
  EXPECT_EQ(recovered.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(recovered.message(), "2 restart attempts")) << recovered;
  EXPECT_TRUE(absl::StrContains(recovered.message(), "does not exist")) << recovered;
  EXPECT_EQ((*group)->failure(), recovered.message());
  EXPECT_FALSE((*group)->Healthy());
  // Final: no more attempts.
  const absl::Time start = absl::Now();
  EXPECT_EQ((*group)->Recover().code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(50));
}

}  // namespace
}  // namespace pagoda::worker
