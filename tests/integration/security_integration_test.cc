// The server's edges under attack, end to end with real processes: the
// worker channel (one Unix-socket endpoint in a private directory, a secret on
// every call, no inherited descriptors, no reflection), and connected
// workers on loopback TCP, plaintext beyond it, and TLS.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "pagoda/v1/generation.grpc.pb.h"
#include "pagoda/worker/v1/worker.grpc.pb.h"
#include "tests/integration/server_process.h"
#include "tests/integration/test_client.h"
#include "wire/worker_secret.h"

namespace pagoda::testing {
namespace {

namespace wv1 = ::pagoda::worker::v1;
using pagoda::v1::Generation;

// The worker's --listen value from its command line.
std::string WorkerEndpoint(pid_t worker) {
  std::ifstream file(absl::StrCat("/proc/", worker, "/cmdline"));
  std::stringstream contents;
  contents << file.rdbuf();
  std::vector<std::string> args = absl::StrSplit(contents.str(), '\0');
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--listen") return args[i + 1];
  }
  return "";
}

// Where each of `pid`'s descriptors points (readlink of /proc/pid/fd/*).
std::vector<std::string> OpenFiles(pid_t pid) {
  std::vector<std::string> targets;
  for (const auto& entry :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/fd"))) {
    std::error_code error;
    const auto target = std::filesystem::read_symlink(entry.path(), error);
    if (!error) targets.push_back(target.string());
  }
  return targets;
}

// Inodes of `pid`'s sockets.
std::vector<std::string> SocketInodes(pid_t pid) {
  std::vector<std::string> inodes;
  for (const std::string& target : OpenFiles(pid)) {
    if (absl::StartsWith(target, "socket:[")) {
      inodes.push_back(target.substr(8, target.size() - 9));
    }
  }
  return inodes;
}

bool Contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

// Listening TCP sockets (state 0A) among `inodes`, from /proc/net/tcp{,6}.
int ListeningTcpSockets(const std::vector<std::string>& inodes) {
  int count = 0;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream file(table);
    std::string line;
    std::getline(file, line);  // Header.
    while (std::getline(file, line)) {
      std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (fields.size() > 9 && fields[3] == "0A" && Contains(inodes, fields[9])) ++count;
    }
  }
  return count;
}

// Paths of listening Unix sockets (flag __SO_ACCEPTCON) among `inodes`.
std::vector<std::string> ListeningUnixSockets(const std::vector<std::string>& inodes) {
  std::vector<std::string> paths;
  std::ifstream file("/proc/net/unix");
  std::string line;
  std::getline(file, line);  // Header.
  while (std::getline(file, line)) {
    std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (fields.size() > 7 && fields[3] == "00010000" && Contains(inodes, fields[6])) {
      paths.push_back(fields[7]);
    }
  }
  return paths;
}

// The /proc/net/unix line of Unix socket `inode`, split into fields (empty
// if there is none): a named socket has its path as the eighth field.
std::vector<std::string> UnixSocketFields(const std::string& inode) {
  std::ifstream file("/proc/net/unix");
  std::string line;
  std::getline(file, line);  // Header.
  while (std::getline(file, line)) {
    std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (fields.size() > 6 && fields[6] == inode) return fields;
  }
  return {};
}

class WorkerChannelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_dir_ = new std::string(
        (std::filesystem::temp_directory_path() / absl::StrCat("pagoda_security_", getpid()))
            .string());
    ASSERT_TRUE(MakeTinyModel(*model_dir_).ok());
    // A descriptor the server inherits from this test (not close-on-exec):
    // the worker must not get it.
    canary_path_ = new std::string(*model_dir_ + "/canary");
    std::ofstream(*canary_path_) << "canary";
    canary_fd_ = open(canary_path_->c_str(), O_RDONLY);
    ASSERT_GE(canary_fd_, 0);
    auto server =
        ServerProcess::Start(PAGODA_SERVER_BINARY,
                             {absl::StrCat("--model=", *model_dir_), "--max-model-len=128",
                              "--block-size=4", "--num-gpu-blocks-override=64", "--port=0"},
                             absl::Seconds(60));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    close(canary_fd_);
    std::filesystem::remove_all(*model_dir_);
    delete model_dir_;
    delete canary_path_;
  }

  static pid_t worker() { return server_->worker_pids().at(0); }

  std::unique_ptr<wv1::Worker::Stub> WorkerStub() {
    return wv1::Worker::NewStub(
        grpc::CreateChannel(WorkerEndpoint(worker()), grpc::InsecureChannelCredentials()));
  }

  std::unique_ptr<Generation::Stub> ServerStub() {
    return Generation::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
  }

  // Calls every Worker RPC with `secret` (none if empty); returns the codes.
  std::vector<grpc::StatusCode> CallEveryRpc(const std::string& secret) {
    auto stub = WorkerStub();
    std::vector<grpc::StatusCode> codes;
    auto context = [&] {
      auto made = std::make_unique<grpc::ClientContext>();
      made->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      if (!secret.empty()) made->AddMetadata(kWorkerSecretMetadataKey, secret);
      return made;
    };
    wv1::LoadModelRequest load;
    load.set_model_dir(*model_dir_);
    load.set_block_size(4);
    wv1::LoadModelResponse loaded;
    codes.push_back(stub->LoadModel(context().get(), load, &loaded).error_code());
    wv1::InitCacheRequest init;
    init.set_num_gpu_blocks(1);  // Would break every later step.
    wv1::InitCacheResponse inited;
    codes.push_back(stub->InitCache(context().get(), init, &inited).error_code());
    wv1::StepResult stepped;
    codes.push_back(stub->ExecuteStep(context().get(), ForgedStep(), &stepped).error_code());
    wv1::ShutdownResponse shut;
    codes.push_back(stub->Shutdown(context().get(), wv1::ShutdownRequest(), &shut).error_code());
    return codes;
  }

  // A step that writes garbage K/V over the first blocks: the other
  // request's cache, had it been accepted.
  static wv1::StepPlan ForgedStep() {
    wv1::StepPlan plan;
    plan.set_step_id(1 << 30);
    wv1::SequenceStep* seq = plan.add_sequences();
    seq->set_seq_id(987654);
    for (int i = 0; i < 32; ++i) seq->add_token_ids(200 + i % 50);
    seq->set_start_position(0);
    for (int block = 0; block < 8; ++block) seq->add_block_table(block);
    seq->set_do_sample(true);
    return plan;
  }

  static std::string* model_dir_;
  static std::string* canary_path_;
  static int canary_fd_;
  static ServerProcess* server_;
};

std::string* WorkerChannelTest::model_dir_ = nullptr;
std::string* WorkerChannelTest::canary_path_ = nullptr;
int WorkerChannelTest::canary_fd_ = -1;
ServerProcess* WorkerChannelTest::server_ = nullptr;

TEST_F(WorkerChannelTest, WorkerListensOnOneUnixSocketInAPrivateDirectory) {
  const std::string endpoint = WorkerEndpoint(worker());
  ASSERT_TRUE(absl::StartsWith(endpoint, "unix:")) << endpoint;
  const std::string path = endpoint.substr(5);
  struct stat dir_stat;
  ASSERT_EQ(stat(std::filesystem::path(path).parent_path().c_str(), &dir_stat), 0);
  EXPECT_EQ(dir_stat.st_mode & 0777, 0700u);
  EXPECT_EQ(dir_stat.st_uid, getuid());
  const std::vector<std::string> inodes = SocketInodes(worker());
  EXPECT_EQ(ListeningTcpSockets(inodes), 0);
  EXPECT_EQ(ListeningUnixSockets(inodes), std::vector<std::string>{path});
}

// The step channel (fd 4) is one end of a socket pair: no path names it and
// it does not listen, so no other process can reach the worker through it.
TEST_F(WorkerChannelTest, StepChannelIsAnUnnamedConnectedSocket) {
  std::error_code error;
  const std::string target =
      std::filesystem::read_symlink(absl::StrCat("/proc/", worker(), "/fd/4"), error).string();
  ASSERT_FALSE(error) << error.message();
  ASSERT_TRUE(absl::StartsWith(target, "socket:[")) << target;
  const std::vector<std::string> fields = UnixSocketFields(target.substr(8, target.size() - 9));
  ASSERT_GE(fields.size(), 7u) << "not a Unix socket: " << target;
  EXPECT_EQ(fields.size(), 7u) << "the step channel has a path: " << fields.back();
  EXPECT_NE(fields[3], "00010000") << "the step channel listens";
}

TEST_F(WorkerChannelTest, WorkerInheritsNoDescriptorOfTheServer) {
  const std::string canary = std::filesystem::canonical(*canary_path_).string();
  ASSERT_TRUE(Contains(OpenFiles(server_->pid()), canary)) << "the server should inherit it";
  EXPECT_FALSE(Contains(OpenFiles(worker()), canary));
  // Nor does the secret travel in argv or the environment.
  std::ifstream environ_file(absl::StrCat("/proc/", worker(), "/environ"));
  std::stringstream environ_text;
  environ_text << environ_file.rdbuf();
  EXPECT_FALSE(absl::StrContains(environ_text.str(), "SECRET"));
}

TEST_F(WorkerChannelTest, EveryRpcWithoutTheSecretIsUnauthenticatedAndChangesNothing) {
  auto server = ServerStub();
  // Greedy tokens before, while and after the forged calls must agree.
  const auto request = TokenRequest(TestPrompt(9, 4), 40);
  const StreamOutcome before = RunStream(*server, request);
  ASSERT_TRUE(before.status.ok()) << before.status.error_message();
  StreamOutcome during;
  std::thread victim([&] { during = RunStream(*server, request); });
  const std::vector<grpc::StatusCode> all_unauthenticated(4, grpc::StatusCode::UNAUTHENTICATED);
  for (int round = 0; round < 5; ++round) {
    EXPECT_EQ(CallEveryRpc(""), all_unauthenticated);
    EXPECT_EQ(CallEveryRpc("a-wrong-secret-of-enough-length-0123456789abcdef0123456789abcd"),
              all_unauthenticated);
  }
  victim.join();
  ASSERT_TRUE(during.status.ok()) << during.status.error_message();
  EXPECT_EQ(during.tokens, before.tokens);
  const StreamOutcome after = RunStream(*server, request);
  ASSERT_TRUE(after.status.ok()) << after.status.error_message();
  EXPECT_EQ(after.tokens, before.tokens);
  EXPECT_EQ(kill(worker(), 0), 0);  // The refused Shutdown left it running.
}

// A memory figure of `pid` in KiB from /proc/PID/status (`field`: "VmRSS",
// "VmHWM"), or -1.
int64_t StatusKib(pid_t pid, absl::string_view field) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string text;
  while (std::getline(status, text)) {
    absl::string_view line = text;
    int64_t kib = 0;
    if (absl::ConsumePrefix(&line, field) && absl::ConsumePrefix(&line, ":") &&
        absl::SimpleAtoi(absl::StripSuffix(absl::StripAsciiWhitespace(line), " kB"), &kib)) {
      return kib;
    }
  }
  return -1;
}

int64_t ResidentKib(pid_t pid) { return StatusKib(pid, "VmRSS"); }

// Sets `pid`'s VmHWM back to its VmRSS (clear_refs 5), so that a later VmHWM
// is the peak since now, short-lived peaks between samples included. When
// that is refused, VmHWM keeps any earlier peak: a figure too high, never
// too low.
void ResetPeakResident(pid_t pid) {
  std::ofstream(absl::StrCat("/proc/", pid, "/clear_refs")) << "5";
}

// The bytes of a StepPlan of about `bytes`: one sequence of that many token
// ids of 1 (one byte each, packed), as a hostile caller could send.
std::string HugeStepPlanBytes(size_t bytes) {
  auto varint = [](uint64_t value) {
    std::string out;
    for (; value >= 0x80; value >>= 7) out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    out.push_back(static_cast<char>(value));
    return out;
  };
  // SequenceStep.token_ids (field 2, packed), inside StepPlan.sequences (field 2).
  const std::string sequence = "\x12" + varint(bytes) + std::string(bytes, '\x01');
  return "\x12" + varint(sequence.size()) + sequence;
}

// What `calls` concurrent ExecuteStep calls of `call_bytes`, with `secret`
// (none if empty), did to the worker `pid` on `channel`. The peak is the
// larger of VmRSS sampled every 2 ms and VmHWM after the calls.
struct FloodOutcome {
  std::vector<grpc::StatusCode> codes;
  int64_t idle_kib = 0;
  int64_t peak_kib = 0;
  absl::Duration took;
  int64_t grown_kib() const { return peak_kib - idle_kib; }
};

FloodOutcome FloodWithHugeCalls(pid_t pid, std::shared_ptr<grpc::Channel> channel, int calls,
                                size_t call_bytes, const std::string& secret = "") {
  const std::string payload = HugeStepPlanBytes(call_bytes);
  // Every call sends the same bytes, referenced, not copied.
  grpc::Slice slice(payload.data(), payload.size(), grpc::Slice::STATIC_SLICE);
  const grpc::ByteBuffer request(&slice, 1);
  grpc::GenericStub stub(std::move(channel));
  FloodOutcome outcome;
  ResetPeakResident(pid);
  outcome.idle_kib = ResidentKib(pid);
  std::atomic<bool> done{false};
  std::atomic<int64_t> peak_kib{outcome.idle_kib};
  std::thread sampler([&] {
    while (!done.load()) {
      const int64_t now = ResidentKib(pid);
      if (now > peak_kib.load()) peak_kib.store(now);
      absl::SleepFor(absl::Milliseconds(2));
    }
  });
  std::vector<std::promise<grpc::StatusCode>> codes(calls);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<grpc::ByteBuffer> responses(calls);
  const absl::Time start = absl::Now();
  for (int i = 0; i < calls; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts[i]->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    if (!secret.empty()) contexts[i]->AddMetadata(kWorkerSecretMetadataKey, secret);
    stub.UnaryCall(contexts[i].get(), "/pagoda.worker.v1.Worker/ExecuteStep", grpc::StubOptions(),
                   &request, &responses[i],
                   [&codes, i](grpc::Status status) { codes[i].set_value(status.error_code()); });
  }
  for (int i = 0; i < calls; ++i) outcome.codes.push_back(codes[i].get_future().get());
  outcome.took = absl::Now() - start;
  done = true;
  sampler.join();
  outcome.peak_kib = std::max(peak_kib.load(), StatusKib(pid, "VmHWM"));
  std::printf("worker RSS idle %lld KiB, peak (VmHWM) %lld KiB under %d x %zu MiB calls "
              "(+%lld KiB), all answered in %s\n",
              static_cast<long long>(outcome.idle_kib), static_cast<long long>(outcome.peak_kib),
              calls, call_bytes >> 20, static_cast<long long>(outcome.grown_kib()),
              absl::FormatDuration(outcome.took).c_str());
  return outcome;
}

// The bound: 16 concurrent 100 MB calls without the secret grow a
// worker's memory by less than 64 MiB.
constexpr int kFloodCalls = 16;
constexpr size_t kFloodCallBytes = size_t{100} << 20;
constexpr int64_t kFloodAllowedKib = 64 << 10;

// 16 concurrent 100 MB ExecuteStep calls on `channel` with `secret` (none if
// empty, else a wrong one): each UNAUTHENTICATED, and `worker` grows by less
// than kFloodAllowedKib.
void ExpectFloodRefusedFromHeaders(pid_t worker, std::shared_ptr<grpc::Channel> channel,
                                   const std::string& secret) {
  SCOPED_TRACE(secret.empty() ? "without the secret" : "with a wrong secret");
  const FloodOutcome flood =
      FloodWithHugeCalls(worker, std::move(channel), kFloodCalls, kFloodCallBytes, secret);
  ASSERT_GT(flood.idle_kib, 0);
  for (int i = 0; i < kFloodCalls; ++i) {
    EXPECT_EQ(flood.codes[i], grpc::StatusCode::UNAUTHENTICATED) << "call " << i;
  }
  EXPECT_LT(flood.grown_kib(), kFloodAllowedKib);
}

// 16 concurrent 100 MB calls without the secret are refused from their
// headers (secret_auth_processor.h), before gRPC reads their messages: the
// worker's memory stays within 64 MiB of what it held idle.
TEST_F(WorkerChannelTest, LargeCallsWithoutTheSecretCostTheWorkerNoMemory) {
  const FloodOutcome flood = FloodWithHugeCalls(
      worker(),
      grpc::CreateChannel(WorkerEndpoint(worker()), grpc::experimental::LocalCredentials(UDS)),
      kFloodCalls, kFloodCallBytes);
  ASSERT_GT(flood.idle_kib, 0);
  for (int i = 0; i < kFloodCalls; ++i) {
    EXPECT_EQ(flood.codes[i], grpc::StatusCode::UNAUTHENTICATED) << "call " << i;
  }
  EXPECT_LT(flood.grown_kib(), kFloodAllowedKib);
  // The worker still serves its server.
  const StreamOutcome served = RunStream(*ServerStub(), TokenRequest(TestPrompt(5, 2), 3));
  EXPECT_TRUE(served.status.ok()) << served.status.error_message();
}

// The code of a reflection call to `channel`, with `secret` unless empty.
grpc::StatusCode CallReflection(std::shared_ptr<grpc::Channel> channel, const std::string& secret) {
  grpc::GenericStub stub(std::move(channel));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (!secret.empty()) context.AddMetadata(kWorkerSecretMetadataKey, secret);
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                 grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status status) { done.set_value(status); });
  return done.get_future().get().error_code();
}

// Without the secret no method is reached at all (the headers are refused);
// with it (ConnectedWorkerTest) reflection is UNIMPLEMENTED.
TEST_F(WorkerChannelTest, ReflectionIsOffOnWorkers) {
  EXPECT_EQ(CallReflection(grpc::CreateChannel(WorkerEndpoint(worker()),
                                               grpc::InsecureChannelCredentials()),
                           ""),
            grpc::StatusCode::UNAUTHENTICATED);
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

// A secret file other local users can read is refused at start-up by both
// ends, with a message that says how to fix it.
TEST(SecretFileTest, ReadableByOthersOrWritableByGroupIsRefusedAtStartUp) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / absl::StrCat("pagoda_secret_mode_", getpid()))
          .string();
  ASSERT_TRUE(MakeTinyModel(dir).ok());
  const std::string secret = dir + "/secret";
  std::ofstream(secret) << "connected-worker-secret-0123456789\n";
  for (const char* mode : {"644", "660", "604"}) {
    ASSERT_EQ(chmod(secret.c_str(), std::stoi(mode, nullptr, 8)), 0);
    absl::StatusOr<std::string> worker = RunCommand(absl::StrCat(
        PAGODA_WORKER_BINARY, " --listen=127.0.0.1:0 --secret-file=", secret, " 2>&1; echo EXIT=$?"));
    ASSERT_TRUE(worker.ok()) << worker.status();
    EXPECT_TRUE(absl::StrContains(*worker, "chmod 600")) << *worker;
    EXPECT_TRUE(absl::StrContains(*worker, "EXIT=1")) << *worker;
    absl::StatusOr<std::string> server = RunCommand(absl::StrCat(
        PAGODA_SERVER_BINARY, " --model=", dir,
        " --max-model-len=128 --port=0 --metrics-port=-1 --worker-addresses=127.0.0.1:1",
        " --worker-secret-file=", secret, " 2>&1; echo EXIT=$?"));
    ASSERT_TRUE(server.ok()) << server.status();
    EXPECT_TRUE(absl::StrContains(*server, "chmod 600")) << *server;
    EXPECT_FALSE(absl::StrContains(*server, "EXIT=0")) << *server;
  }
  std::filesystem::remove_all(dir);
}

// A worker the server connects to over mutual TLS plus the secret, on a
// network address (0.0.0.0: plaintext there would check the secret only
// after a whole message). The server dials 127.0.0.2, a host its
// certificate does not name, and checks the fixed name
// --worker-ssl-server-name instead, as the Helm chart does for pod IPs.
TEST(ConnectedWorkerTest, MutualTlsAndTheSecretAreBothRequired) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / absl::StrCat("pagoda_mtls_", getpid())).string();
  ASSERT_TRUE(MakeTinyModel(dir).ok());
  ASSERT_TRUE(MakeCertificates(dir).ok());
  const std::string secret = "connected-worker-secret-0123456789";
  std::ofstream(dir + "/secret") << secret << "\n";
  std::filesystem::permissions(dir + "/secret",
                               std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  auto worker =
      ServerProcess::Start(PAGODA_WORKER_BINARY,
                           {"--listen=0.0.0.0:0", absl::StrCat("--secret-file=", dir, "/secret"),
                            absl::StrCat("--ssl-certfile=", dir, "/server.pem"),
                            absl::StrCat("--ssl-keyfile=", dir, "/server.key"),
                            absl::StrCat("--ssl-ca-certs=", dir, "/ca.pem")},
                           absl::Seconds(30), "PAGODA_WORKER_LISTENING");
  ASSERT_TRUE(worker.ok()) << worker.status();
  const std::string address = absl::StrCat("127.0.0.2:", (*worker)->port());
  const std::vector<std::string> server_flags = {
      absl::StrCat("--model=", dir), "--max-model-len=128", "--block-size=4",
      "--num-gpu-blocks-override=64", "--port=0", absl::StrCat("--worker-addresses=", address),
      absl::StrCat("--worker-secret-file=", dir, "/secret"),
      absl::StrCat("--worker-ssl-certfile=", dir, "/client.pem"),
      absl::StrCat("--worker-ssl-keyfile=", dir, "/client.key")};
  // A CA that did not sign the worker's certificate: refused at start-up,
  // saying what to check.
  absl::StatusOr<std::string> wrong_ca = RunCommand(absl::StrCat(
      PAGODA_SERVER_BINARY, " ", absl::StrJoin(server_flags, " "), " --worker-ssl-ca-certs=", dir,
      "/rogue-ca.pem --worker-ssl-server-name=pagoda-worker --worker-start-timeout=1 2>&1 "
      "</dev/null; echo EXIT=$?"));
  ASSERT_TRUE(wrong_ca.ok()) << wrong_ca.status();
  EXPECT_TRUE(absl::StrContains(*wrong_ca, "signed by the --worker-ssl-ca-certs CA")) << *wrong_ca;
  EXPECT_FALSE(absl::StrContains(*wrong_ca, "EXIT=0")) << *wrong_ca;
  std::vector<std::string> flags = server_flags;
  flags.push_back(absl::StrCat("--worker-ssl-ca-certs=", dir, "/ca.pem"));
  flags.push_back("--worker-ssl-server-name=pagoda-worker");
  auto server = ServerProcess::Start(PAGODA_SERVER_BINARY, flags, absl::Seconds(60));
  ASSERT_TRUE(server.ok()) << server.status();
  auto generation = Generation::NewStub(
      grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  const StreamOutcome served = RunStream(*generation, TokenRequest(TestPrompt(5, 1), 4));
  ASSERT_TRUE(served.status.ok()) << served.status.error_message();
  EXPECT_EQ(served.tokens.size(), 4u);

  // Calls a worker RPC (Shutdown: the most harmful) as some client.
  auto shutdown_as = [&](std::shared_ptr<grpc::ChannelCredentials> credentials,
                         const std::string& with_secret) {
    auto stub = wv1::Worker::NewStub(grpc::CreateChannel(address, credentials));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    if (!with_secret.empty()) context.AddMetadata(kWorkerSecretMetadataKey, with_secret);
    wv1::ShutdownResponse response;
    return stub->Shutdown(&context, wv1::ShutdownRequest(), &response).error_code();
  };
  auto tls_as = [&](const std::string& name) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFile(dir + "/ca.pem");
    ssl.pem_cert_chain = ReadFile(absl::StrCat(dir, "/", name, ".pem"));
    ssl.pem_private_key = ReadFile(absl::StrCat(dir, "/", name, ".key"));
    return grpc::SslCredentials(ssl);
  };
  grpc::ChannelArguments named;
  named.SetSslTargetNameOverride("pagoda-worker");
  auto client_channel = [&] { return grpc::CreateCustomChannel(address, tls_as("client"), named); };
  // Plaintext, or a certificate from another CA: no connection at all.
  EXPECT_EQ(shutdown_as(grpc::InsecureChannelCredentials(), secret), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(shutdown_as(tls_as("rogue"), secret), grpc::StatusCode::UNAVAILABLE);
  // The right certificate without the secret, or with a wrong one: refused
  // from the call's headers, so 16 concurrent 100 MB calls cost the worker
  // (model loaded) less than 64 MiB.
  ExpectFloodRefusedFromHeaders((*worker)->pid(), client_channel(), "");
  ExpectFloodRefusedFromHeaders((*worker)->pid(), client_channel(),
                                "wrong-secret-0123456789abcdef");
  // The server's credentials reach the methods, and reflection is not one.
  EXPECT_EQ(CallReflection(client_channel(), secret), grpc::StatusCode::UNIMPLEMENTED);
  // Nothing changed: the worker still serves the server.
  const StreamOutcome again = RunStream(*generation, TokenRequest(TestPrompt(5, 1), 4));
  ASSERT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_EQ(again.tokens, served.tokens);
  server->reset();
  worker->reset();
  std::filesystem::remove_all(dir);
}

constexpr char kConnectedWorkerSecret[] = "connected-worker-secret-0123456789";

// A fresh directory named `name` + this process's id holding "secret"
// (kConnectedWorkerSecret, mode 600); the caller removes it.
std::string MakeSecretDir(absl::string_view name) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / absl::StrCat(name, getpid())).string();
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/secret") << kConnectedWorkerSecret << "\n";
  std::filesystem::permissions(dir + "/secret", std::filesystem::perms::owner_read |
                                                    std::filesystem::perms::owner_write);
  return dir;
}

// A pagoda-worker on `listen` with the secret of `dir` (MakeSecretDir) and
// `more` flags; no model loaded.
absl::StatusOr<std::unique_ptr<ServerProcess>> StartConnectedWorker(
    const std::string& dir, const std::string& listen, std::vector<std::string> more = {}) {
  more.push_back(absl::StrCat("--listen=", listen));
  more.push_back(absl::StrCat("--secret-file=", dir, "/secret"));
  return ServerProcess::Start(PAGODA_WORKER_BINARY, std::move(more), absl::Seconds(30),
                              "PAGODA_WORKER_LISTENING");
}

// The code of an empty ExecuteStep on `channel` with `secret` (none if
// empty): UNAUTHENTICATED without the right one; with it the handler
// answers (no model is loaded: never UNAUTHENTICATED or RESOURCE_EXHAUSTED).
grpc::StatusCode EmptyStepCode(std::shared_ptr<grpc::Channel> channel, const std::string& secret) {
  auto stub = wv1::Worker::NewStub(std::move(channel));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (!secret.empty()) context.AddMetadata(kWorkerSecretMetadataKey, secret);
  wv1::StepResult result;
  return stub->ExecuteStep(&context, wv1::StepPlan(), &result).error_code();
}

void ExpectHandlerReached(grpc::StatusCode code) {
  EXPECT_NE(code, grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(code, grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(code, grpc::StatusCode::UNAVAILABLE);
}

// A worker on loopback TCP serves local credentials (wire/worker_transport.h),
// so, as on a unix socket, its auth processor refuses calls without the
// secret from their headers: 16 concurrent 100 MB calls, without the secret
// (plaintext, as any local process could send) or with a wrong one (the
// server's own local credentials), cost it less than 64 MiB at the default
// receive limit (256 MiB).
TEST(LoopbackWorkerTest, LargeCallsWithoutTheSecretCostTheWorkerNoMemory) {
  const std::string dir = MakeSecretDir("pagoda_loopback_");
  auto worker = StartConnectedWorker(dir, "127.0.0.1:0");
  ASSERT_TRUE(worker.ok()) << worker.status();
  const std::string address = (*worker)->address();
  const struct {
    std::shared_ptr<grpc::ChannelCredentials> credentials;
    std::string secret;
  } callers[] = {
      {grpc::InsecureChannelCredentials(), ""},
      {grpc::experimental::LocalCredentials(LOCAL_TCP), "a-wrong-secret-0123456789abcdef"},
  };
  for (const auto& caller : callers) {
    const FloodOutcome flood =
        FloodWithHugeCalls((*worker)->pid(), grpc::CreateChannel(address, caller.credentials),
                           kFloodCalls, kFloodCallBytes, caller.secret);
    ASSERT_GT(flood.idle_kib, 0);
    for (int i = 0; i < kFloodCalls; ++i) {
      EXPECT_EQ(flood.codes[i], grpc::StatusCode::UNAUTHENTICATED) << "call " << i;
    }
    EXPECT_LT(flood.grown_kib(), kFloodAllowedKib);
  }
  // Still serving, with the secret, over local credentials (what the server
  // uses for a loopback worker) and plaintext (wire-compatible).
  ExpectHandlerReached(EmptyStepCode(
      grpc::CreateChannel(address, grpc::experimental::LocalCredentials(LOCAL_TCP)),
      kConnectedWorkerSecret));
  ExpectHandlerReached(EmptyStepCode(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()), kConnectedWorkerSecret));
  worker->reset();
  std::filesystem::remove_all(dir);
}

// Whether this host can bind ::1 (containers may run without IPv6).
bool HasIpv6Loopback() {
  const int fd = socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_addr = in6addr_loopback;
  const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return bound;
}

// wire/worker_transport.h's rule against gRPC's: a worker on each address
// serves calls with the secret over the credentials the server picks for it
// (local ones on loopback, plaintext beyond) and refuses them without. A rule
// wider than gRPC's local credentials leaves a worker no one can reach:
// gRPC 1.51 closes connections to 127.0.0.2.
TEST(LoopbackWorkerTest, EveryLoopbackFormServesTheServer) {
  const std::string dir = MakeSecretDir("pagoda_loopback_forms_");
  const bool ipv6 = HasIpv6Loopback();
  if (!ipv6) std::printf("no IPv6 loopback on this host: [::1] not tried\n");
  const struct {
    std::string host;
    std::shared_ptr<grpc::ChannelCredentials> credentials;
  } forms[] = {
      {"localhost", grpc::experimental::LocalCredentials(LOCAL_TCP)},
      {"[::1]", grpc::experimental::LocalCredentials(LOCAL_TCP)},
      {"127.0.0.2", grpc::InsecureChannelCredentials()},  // Loopback to the kernel only.
  };
  for (const auto& form : forms) {
    SCOPED_TRACE(form.host);
    if (form.host == "[::1]" && !ipv6) continue;
    auto worker = StartConnectedWorker(dir, form.host + ":0");
    ASSERT_TRUE(worker.ok()) << worker.status();
    auto channel =
        grpc::CreateChannel(absl::StrCat(form.host, ":", (*worker)->port()), form.credentials);
    ExpectHandlerReached(EmptyStepCode(channel, kConnectedWorkerSecret));
    EXPECT_EQ(EmptyStepCode(channel, ""), grpc::StatusCode::UNAUTHENTICATED);
  }
  std::filesystem::remove_all(dir);
}

// A worker on plaintext TCP beyond loopback (here 0.0.0.0, reached through
// loopback) has no auth processor (gRPC runs none without secure
// credentials). Its receive limit (--max-message-bytes) refuses larger calls
// without reaching the handler. KNOWN GAP, printed and not asserted: the
// limit does not bound the transport's memory (16 x 100 MB calls grew a
// worker by about 1.2 GB with a 4 MiB limit); such workers need TLS, where
// the auth processor refuses such calls from their headers.
TEST(ConnectedWorkerTest, ReceiveLimitRefusesLargerPlaintextCalls) {
  const std::string dir = MakeSecretDir("pagoda_limit_");
  auto worker =
      StartConnectedWorker(dir, "0.0.0.0:0", {absl::StrCat("--max-message-bytes=", 4 << 20)});
  ASSERT_TRUE(worker.ok()) << worker.status();
  const std::string address = (*worker)->address();
  const FloodOutcome flood = FloodWithHugeCalls(
      (*worker)->pid(), grpc::CreateChannel(address, grpc::InsecureChannelCredentials()), 4,
      size_t{8} << 20);
  for (size_t i = 0; i < flood.codes.size(); ++i) {
    EXPECT_EQ(flood.codes[i], grpc::StatusCode::RESOURCE_EXHAUSTED) << "call " << i;
  }
  // Still serving: a small call without the secret is refused, one with it
  // reaches the handler (no model loaded yet), also over the local
  // credentials a server uses when it dials this worker at 127.0.0.1.
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  EXPECT_EQ(EmptyStepCode(channel, ""), grpc::StatusCode::UNAUTHENTICATED);
  ExpectHandlerReached(EmptyStepCode(channel, kConnectedWorkerSecret));
  ExpectHandlerReached(EmptyStepCode(
      grpc::CreateChannel(address, grpc::experimental::LocalCredentials(LOCAL_TCP)),
      kConnectedWorkerSecret));
  worker->reset();
  std::filesystem::remove_all(dir);
}

// What a worker on `listen` logs up to its PAGODA_WORKER_LISTENING line
// (its start-up warnings come before it), or in 30 s if that never comes.
std::string StartUpLog(const std::string& dir, const std::string& listen) {
  const std::string log_file = absl::StrCat(dir, "/start-up-", getpid(), ".log");
  absl::StatusOr<std::string> log = RunCommand(absl::StrCat(
      PAGODA_WORKER_BINARY, " --listen=", listen, " --secret-file=", dir, "/secret >", log_file,
      " 2>&1 </dev/null & pid=$!; for i in $(seq 600); do grep -q PAGODA_WORKER_LISTENING ",
      log_file, " && break; sleep 0.05; done; kill $pid; wait $pid; cat ", log_file));
  return log.ok() ? *log : log.status().ToString();
}

// Only plaintext TCP beyond loopback, where a call's secret is checked after
// its message, warns at start-up; loopback and unix sockets check it first.
TEST(ConnectedWorkerTest, PlaintextBeyondLoopbackWarnsAtStartUp) {
  const std::string dir = MakeSecretDir("pagoda_warn_");
  const std::string network = StartUpLog(dir, "0.0.0.0:0");
  EXPECT_TRUE(absl::StrContains(network, "plaintext TCP on an address other than")) << network;
  EXPECT_TRUE(absl::StrContains(network, "unbounded memory")) << network;
  EXPECT_TRUE(absl::StrContains(network, "PAGODA_WORKER_LISTENING")) << network;  // Still serves.
  for (const std::string& local :
       {std::string("127.0.0.1:0"), absl::StrCat("unix:", dir, "/w.sock")}) {
    const std::string log = StartUpLog(dir, local);
    EXPECT_TRUE(absl::StrContains(log, "PAGODA_WORKER_LISTENING")) << log;
    EXPECT_FALSE(absl::StrContains(log, "plaintext TCP")) << log;
  }
  std::filesystem::remove_all(dir);
}

TEST(ConnectedWorkerTest, ReceiveLimitOutsideItsRangeIsRefusedAtStartUp) {
  const std::string secret =
      (std::filesystem::temp_directory_path() / absl::StrCat("pagoda_limit_secret_", getpid()))
          .string();
  std::ofstream(secret) << "connected-worker-secret-0123456789\n";
  std::filesystem::permissions(secret, std::filesystem::perms::owner_read);
  for (int64_t bytes : {int64_t{1000}, int64_t{512} << 20}) {
    absl::StatusOr<std::string> worker = RunCommand(absl::StrCat(
        PAGODA_WORKER_BINARY, " --listen=127.0.0.1:0 --secret-file=", secret,
        " --max-message-bytes=", bytes, " 2>&1 </dev/null; echo EXIT=$?"));
    ASSERT_TRUE(worker.ok()) << worker.status();
    // The worker's config speaks the server's words (common/flag_checks.h).
    EXPECT_TRUE(absl::StrContains(
        *worker, absl::StrCat("pagoda-worker: --max-message-bytes ", bytes,
                              " is out of range: expected 1048576 to 268435456")))
        << *worker;
    EXPECT_TRUE(absl::StrContains(*worker, "EXIT=1")) << *worker;
  }
  std::filesystem::remove(secret);
}

// What `binary` with `flags` prints before it exits, and its exit code
// ("EXIT=n").
std::string RunToExit(const std::string& binary, const std::string& flags) {
  absl::StatusOr<std::string> output =
      RunCommand(absl::StrCat(binary, " ", flags, " 2>&1 </dev/null; echo EXIT=$?"));
  return output.ok() ? *output : output.status().ToString();
}

// TLS flags are checked before anything serves or any worker starts: a
// private key others may access (the worker secret file's rule,
// common/private_file.h), a certificate without its key, a file that
// cannot be read, and worker TLS flags a server cannot use.
TEST(ConnectedWorkerTest, TlsFlagsAreCheckedAtStartUp) {
  const std::string dir = MakeSecretDir("pagoda_tls_flags_");
  ASSERT_TRUE(MakeTinyModel(dir, 11, TinyTokenizer::kNone).ok());
  // Read, not parsed, before the key's checks.
  std::ofstream(dir + "/cert.pem") << "-----BEGIN CERTIFICATE-----\n";
  std::ofstream(dir + "/open.key") << "-----BEGIN PRIVATE KEY-----\n";
  ASSERT_EQ(chmod((dir + "/open.key").c_str(), 0644), 0);
  const std::string cert = absl::StrCat(dir, "/cert.pem");
  const std::string open_key = absl::StrCat(dir, "/open.key");
  const std::string worker = absl::StrCat("--listen=0.0.0.0:0 --secret-file=", dir, "/secret ");
  const std::string server =
      absl::StrCat("--model=", dir, " --max-model-len=128 --port=0 --worker-secret-file=", dir,
                   "/secret ");
  const std::string connected = server + "--worker-addresses=127.0.0.1:1 ";
  const struct {
    std::string binary, flags, expected;
  } cases[] = {
      {PAGODA_WORKER_BINARY, worker + "--ssl-certfile=" + cert + " --ssl-keyfile=" + open_key,
       "--ssl-keyfile file '" + open_key + "' is accessible to others or writable by its group (mode 0644)"},
      {PAGODA_WORKER_BINARY, worker + "--ssl-certfile=" + cert, "go together"},
      {PAGODA_WORKER_BINARY, worker + "--ssl-certfile=" + dir + "/none.pem --ssl-keyfile=" + dir +
           "/secret",
       "--ssl-certfile: cannot read"},
      {PAGODA_SERVER_BINARY,
       connected + "--worker-ssl-ca-certs=" + cert + " --worker-ssl-certfile=" + cert +
           " --worker-ssl-keyfile=" + open_key,
       "chmod 600 '" + open_key + "'"},
      {PAGODA_SERVER_BINARY, connected + "--worker-ssl-server-name=pagoda-worker",
       "--worker-ssl-server-name needs --worker-ssl-ca-certs"},
      {PAGODA_SERVER_BINARY, server + "--worker-ssl-ca-certs=" + cert,
       "--worker-ssl-* are for --worker-addresses workers"},
  };
  for (const auto& refused : cases) {
    const std::string output = RunToExit(refused.binary, refused.flags);
    EXPECT_TRUE(absl::StrContains(output, refused.expected)) << refused.flags << "\n" << output;
    EXPECT_TRUE(absl::StrContains(output, "EXIT=1")) << refused.flags << "\n" << output;
    EXPECT_FALSE(absl::StrContains(output, "LISTENING")) << refused.flags << "\n" << output;
  }
  std::filesystem::remove_all(dir);
}

// A worker whose receive limit (--max-message-bytes) is below the largest
// step plan its server can send (scheduler/engine/step_plan_bound.h: here
// 256 rows of a 128-token model, over 1 MiB) stops the server at start-up
// in one line naming both numbers, not at the first step that large.
TEST(ConnectedWorkerTest, WorkerReceiveLimitBelowTheServersPlansIsRefusedAtStartUp) {
  const std::string dir = MakeSecretDir("pagoda_small_limit_");
  ASSERT_TRUE(MakeTinyModel(dir, 11, TinyTokenizer::kNone).ok());
  auto worker =
      StartConnectedWorker(dir, "127.0.0.1:0", {absl::StrCat("--max-message-bytes=", 1 << 20)});
  ASSERT_TRUE(worker.ok()) << worker.status();
  const std::string output = RunToExit(
      PAGODA_SERVER_BINARY,
      absl::StrCat("--model=", dir, " --max-model-len=128 --max-num-seqs=256 --port=0",
                   " --worker-addresses=", (*worker)->address(), " --worker-secret-file=", dir,
                   "/secret"));
  EXPECT_TRUE(absl::StrContains(output, absl::StrCat("accepts messages of at most ", 1 << 20,
                                                     " bytes (pagoda-worker --max-message-bytes)")))
      << output;
  EXPECT_TRUE(absl::StrContains(output, "of this server's largest step plan")) << output;
  EXPECT_TRUE(absl::StrContains(output, "EXIT=1")) << output;
  worker->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pagoda::testing
