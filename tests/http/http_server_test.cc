// The HTTP server's connection handling against an in-process engine (a
// real CPU model, no processes), over raw loopback sockets: the error paths
// a well-behaved client never takes. Deadlines (header, idle), header count
// and size limits, the body-bytes budget, pipelining, Expect: 100-continue,
// a client that stops reading its stream (dropped, request aborted, blocks
// freed) and one that leaves a whole request (aborted, blocks freed).
#include "scheduler/api/http_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "scheduler/api/request_path.h"
#include "tests/fakes/in_process_worker_group.h"
#include "tests/support/tiny_model.h"
#include "worker/cpu/cpu_model_runner.h"

namespace pagoda::scheduler {
namespace {

constexpr char kModelFlags[] =
    "--vocab-size 128 --hidden-size 64 --intermediate-size 96 --num-layers 2 --num-heads 4"
    " --num-kv-heads 2 --dtype f32 --seed 3 --eos-id 2";
constexpr int kBlocks = 256;

// Passes every call to `inner`, each step taking at least `step_time`, so
// that a request is still running when the test acts on it.
class SlowWorkers : public WorkerGroup {
 public:
  SlowWorkers(WorkerGroup* inner, absl::Duration step_time)
      : inner_(inner), step_time_(step_time) {}
  absl::StatusOr<pagoda::worker::v1::LoadModelResponse> LoadModel(
      const pagoda::worker::v1::LoadModelRequest& request) override {
    return inner_->LoadModel(request);
  }
  absl::Status InitCache(const pagoda::worker::v1::InitCacheRequest& request) override {
    return inner_->InitCache(request);
  }
  absl::StatusOr<pagoda::worker::v1::StepResult> ExecuteStep(
      const pagoda::worker::v1::StepPlan& plan, const StepMaskSource& masks) override {
    absl::SleepFor(step_time_);
    return inner_->ExecuteStep(plan, masks);
  }
  bool Healthy() const override { return inner_->Healthy(); }
  int world_size() const override { return inner_->world_size(); }
  void Shutdown() override { inner_->Shutdown(); }

 private:
  WorkerGroup* const inner_;
  const absl::Duration step_time_;
};

// A blocking loopback client socket with a receive timeout.
class Client {
 public:
  explicit Client(int port, int receive_buffer = 0) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (receive_buffer > 0) {
      setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
    }
    timeval timeout{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }
  ~Client() { close(fd_); }
  bool connected() const { return connected_; }
  bool Send(const std::string& bytes) {
    return send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  // Reads until `needle` has been seen, the peer closes, or 5 s pass.
  std::string ReadUntil(const std::string& needle) {
    std::string data;
    char buffer[4096];
    while (!absl::StrContains(data, needle)) {
      const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      data.append(buffer, n);
    }
    return data;
  }
  // Reads everything until the peer closes (or 5 s pass).
  std::string ReadToEnd() { return ReadUntil("\x01never\x01"); }
  // True if the peer has closed within `timeout` (EOF or reset).
  bool ClosedWithin(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    char buffer[4096];
    while (absl::Now() < deadline) {
      pollfd poll_fd{fd_, POLLIN, 50};
      if (poll(&poll_fd, 1, 50) <= 0) continue;
      const ssize_t n = recv(fd_, buffer, sizeof(buffer), MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
    }
    return false;
  }
  void Close() {
    close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

std::string Post(const std::string& path, const std::string& body,
                 const std::string& extra_headers = "") {
  return absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: x\r\nContent-Length: ", body.size(),
                      "\r\n", extra_headers, "\r\n", body);
}

class HttpServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_dir_ = new std::string(pagoda::testing::TempPath("pagoda_http_server"));
    ASSERT_TRUE(pagoda::testing::WriteTinyModel(*model_dir_, kModelFlags).ok());
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*model_dir_);
    delete model_dir_;
  }

  void Start(HttpServerOptions options, absl::Duration step_time = absl::ZeroDuration()) {
    workers_ = std::make_unique<InProcessWorkerGroup>(pagoda::worker::CreateCpuModelRunner());
    slow_ = std::make_unique<SlowWorkers>(workers_.get(), step_time);
    pagoda::worker::v1::LoadModelRequest load;
    load.set_model_dir(*model_dir_);
    load.set_world_size(1);
    load.set_block_size(4);
    load.set_device("cpu");
    load.set_kv_cache_memory_bytes(64 << 20);
    load.set_max_num_batched_tokens(256);
    load.set_max_num_seqs(64);
    ASSERT_TRUE(workers_->LoadModel(load).ok());
    pagoda::worker::v1::InitCacheRequest init;
    init.set_num_gpu_blocks(kBlocks);
    ASSERT_TRUE(workers_->InitCache(init).ok());
    EngineConfig config;
    config.scheduler.block_size = 4;
    config.scheduler.num_gpu_blocks = kBlocks;
    config.scheduler.max_num_seqs = 64;
    config.scheduler.max_num_batched_tokens = 256;
    config.scheduler.max_model_len = 256;
    config.eos_token_ids = {2};
    engine_ = std::make_unique<Engine>(config, slow_.get(), nullptr);
    engine_->Start();
    validator_ = std::make_unique<RequestValidator>(ModelLimits{128, 256, -1}, nullptr, 1);
    options.model_name = "tiny";
    options.max_model_len = 256;
    path_ = std::make_unique<RequestPath>(engine_.get(), validator_.get(), nullptr,
                                          RequestPathOptions{});
    auto server = HttpServer::Start(options, path_.get(), nullptr);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  void TearDown() override {
    if (engine_ != nullptr) engine_->Stop();
    if (server_ != nullptr) server_->Shutdown();
  }

  // True once the engine holds no request and every block is free.
  bool EngineIdleWithin(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      const EngineSnapshot snapshot = engine_->snapshot();
      if (snapshot.num_in_flight == 0 && snapshot.free_gpu_blocks == kBlocks) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }
  int port() const { return server_->port(); }

  static std::string* model_dir_;
  std::unique_ptr<InProcessWorkerGroup> workers_;
  std::unique_ptr<SlowWorkers> slow_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<RequestValidator> validator_;
  std::unique_ptr<RequestPath> path_;
  std::unique_ptr<HttpServer> server_;
};

std::string* HttpServerTest::model_dir_ = nullptr;

TEST_F(HttpServerTest, HeadersNotFinishedInTimeAre408AndIdleConnectionsClose) {
  HttpServerOptions options;
  options.header_timeout = absl::Milliseconds(300);
  options.idle_timeout = absl::Milliseconds(300);
  Start(options);
  Client slow(port());
  ASSERT_TRUE(slow.Send("GET /health HTTP/1.1\r\nHost: x\r\n"));  // Never ends its headers.
  const std::string reply = slow.ReadToEnd();
  EXPECT_TRUE(absl::StartsWith(reply, "HTTP/1.1 408")) << reply;
  EXPECT_TRUE(absl::StrContains(reply, "\"code\":408")) << reply;
  Client idle(port());
  ASSERT_TRUE(idle.Send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_TRUE(absl::StartsWith(idle.ReadUntil("\r\n\r\n"), "HTTP/1.1 200"));
  EXPECT_TRUE(idle.ClosedWithin(absl::Seconds(3)));  // Past the idle timeout.
}

TEST_F(HttpServerTest, TooManyOrTooLargeHeadersAre431) {
  HttpServerOptions options;
  options.max_header_count = 10;
  options.max_header_bytes = 2048;
  Start(options);
  std::string many = "GET /health HTTP/1.1\r\n";
  for (int i = 0; i < 11; ++i) absl::StrAppend(&many, "X-", i, ": y\r\n");
  Client count(port());
  ASSERT_TRUE(count.Send(many + "\r\n"));
  const std::string count_reply = count.ReadToEnd();
  EXPECT_TRUE(absl::StartsWith(count_reply, "HTTP/1.1 431")) << count_reply;
  EXPECT_TRUE(absl::StrContains(count_reply, "\"code\":431")) << count_reply;
  Client size(port());
  ASSERT_TRUE(size.Send("GET /health HTTP/1.1\r\nX-Big: " + std::string(4096, 'a') + "\r\n\r\n"));
  const std::string size_reply = size.ReadToEnd();
  EXPECT_TRUE(absl::StartsWith(size_reply, "HTTP/1.1 431")) << size_reply;
}

// Beast takes any byte above 0x7F in a target, and the 404's message quotes
// the path: its JSON must replace what is not UTF-8, not throw on the
// control loop, which ended the server (found with the http_request fuzzer;
// its input: tests/fuzz/corpus/http_request/regression-non-utf8-path).
TEST_F(HttpServerTest, APathThatIsNotUtf8Gets404AndTheServerStaysUp) {
  Start(HttpServerOptions{});
  Client hostile(port());
  ASSERT_TRUE(hostile.Send("GET /caf\xe9\xff HTTP/1.1\r\nHost: x\r\n\r\n"));
  const std::string reply = hostile.ReadToEnd();
  EXPECT_TRUE(absl::StartsWith(reply, "HTTP/1.1 404")) << reply;
  const size_t body = reply.find("\r\n\r\n");
  ASSERT_NE(body, std::string::npos) << reply;
  const nlohmann::json error = nlohmann::json::parse(reply.substr(body + 4), nullptr, false);
  ASSERT_FALSE(error.is_discarded()) << reply;
  EXPECT_EQ(error["error"]["code"], 404);
  Client next(port());
  ASSERT_TRUE(next.Send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_TRUE(absl::StartsWith(next.ReadUntil("\r\n\r\n"), "HTTP/1.1 200"));
}

// A 1.2 MB body of arrays nested 300,000 deep in `tools` overflowed the
// server's stack (copying parsed JSON recurses once per level): every route
// refuses bodies nested past 64 levels with a 400.
TEST_F(HttpServerTest, BodiesNestedTooDeeplyAre400AndTheServerStaysUp) {
  Start(HttpServerOptions{});
  const std::string nested = std::string(300'000, '[') + std::string(300'000, ']');
  const std::pair<const char*, std::string> bodies[] = {
      {"/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "hi"}], "tools": )" + nested + "}"},
      {"/v1/completions", R"({"prompt": [5, 6], "max_tokens": 1, "x": )" + nested + "}"},
      {"/tokenize", R"({"prompt": "hi", "x": )" + nested + "}"},
  };
  for (const auto& [path, body] : bodies) {
    Client hostile(port());
    ASSERT_TRUE(hostile.Send(Post(path, body, "Connection: close\r\n")));
    const std::string reply = hostile.ReadToEnd();
    EXPECT_TRUE(absl::StartsWith(reply, "HTTP/1.1 400")) << path << ": " << reply.substr(0, 200);
    EXPECT_TRUE(absl::StrContains(reply, "nested deeper than 64")) << path;
  }
  Client next(port());
  ASSERT_TRUE(next.Send(
      Post("/v1/completions", R"({"prompt": [5, 6], "max_tokens": 1})", "Connection: close\r\n")));
  EXPECT_TRUE(absl::StartsWith(next.ReadToEnd(), "HTTP/1.1 200"));
}

TEST_F(HttpServerTest, BodiesOverTheBudgetOfAllConnectionsAre503) {
  HttpServerOptions options;
  options.max_body_bytes_in_flight = 64 << 10;
  Start(options);
  // One connection holds a 48 KiB body half sent; a second 48 KiB body
  // would pass the 64 KiB budget.
  // The server reserves a body's share before it answers 100 Continue.
  Client first(port());
  ASSERT_TRUE(
      first.Send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 49152\r\n"
                 "Expect: 100-continue\r\n\r\n"));
  ASSERT_TRUE(absl::StartsWith(first.ReadUntil("\r\n\r\n"), "HTTP/1.1 100 Continue"));
  Client second(port());
  ASSERT_TRUE(
      second.Send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 49152\r\n\r\n"));
  const std::string reply = second.ReadUntil("}}");
  EXPECT_TRUE(absl::StartsWith(reply, "HTTP/1.1 503")) << reply;
  first.Close();
  // Freed once the server has seen the first connection close: the same
  // body is read then (refused until it has, within a deadline).
  std::string third_reply;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  do {
    Client third(port());
    ASSERT_TRUE(third.Send(Post("/v1/completions", std::string(49152, ' '))));
    third_reply = third.ReadUntil("}}");
  } while (absl::StartsWith(third_reply, "HTTP/1.1 503") && absl::Now() < deadline);
  EXPECT_TRUE(absl::StartsWith(third_reply, "HTTP/1.1 400")) << third_reply;  // Not JSON.
}

// vLLM's --served-model-name A B: /v1/models lists a card a name, a request
// may name any (its answer reports the first), and another name is 404.
TEST_F(HttpServerTest, EveryServedNameIsListedAndServed) {
  HttpServerOptions options;
  options.model_aliases = {"tiny-alias"};
  Start(options);
  Client models(port());
  ASSERT_TRUE(models.Send("GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  const std::string listed = models.ReadToEnd();
  EXPECT_TRUE(absl::StrContains(listed, R"("id":"tiny")")) << listed;
  EXPECT_TRUE(absl::StrContains(listed, R"("id":"tiny-alias")")) << listed;
  Client card(port());
  ASSERT_TRUE(
      card.Send("GET /v1/models/tiny-alias HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  EXPECT_TRUE(absl::StartsWith(card.ReadToEnd(), "HTTP/1.1 200")) << listed;
  const auto complete = [&](const std::string& model) {
    Client client(port());
    EXPECT_TRUE(client.Send(
        Post("/v1/completions",
             absl::StrCat(R"({"model": ")", model, R"(", "prompt": [5, 6], "max_tokens": 1})"))));
    return client.ReadUntil("}}");
  };
  const std::string by_alias = complete("tiny-alias");
  EXPECT_TRUE(absl::StartsWith(by_alias, "HTTP/1.1 200")) << by_alias;
  EXPECT_TRUE(absl::StrContains(by_alias, R"("model":"tiny")")) << by_alias;
  const std::string other = complete("tiny-other");
  EXPECT_TRUE(absl::StartsWith(other, "HTTP/1.1 404")) << other;
}

TEST_F(HttpServerTest, PipelinedRequestsAreAnsweredInOrderAndExpectContinueIsHonoured) {
  Start(HttpServerOptions());
  Client client(port());
  const std::string body = R"({"prompt": [5, 6, 7], "max_tokens": 2, "temperature": 0})";
  ASSERT_TRUE(client.Send(Post("/v1/completions", body) +
                          "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n" +
                          "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  const std::string replies = client.ReadToEnd();
  const size_t completion = replies.find("text_completion");
  const size_t models = replies.find("\"object\":\"list\"");
  const size_t health = replies.rfind("HTTP/1.1 200");
  ASSERT_NE(completion, std::string::npos) << replies;
  ASSERT_NE(models, std::string::npos) << replies;
  EXPECT_LT(completion, models);
  EXPECT_LT(models, health);
  Client expect(port());
  ASSERT_TRUE(expect.Send(
      absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ", body.size(),
                   "\r\nExpect: 100-continue\r\n\r\n")));
  EXPECT_TRUE(absl::StartsWith(expect.ReadUntil("\r\n\r\n"), "HTTP/1.1 100 Continue"));
  ASSERT_TRUE(expect.Send(body));
  EXPECT_TRUE(absl::StrContains(expect.ReadUntil("}}"), "text_completion"));
}

TEST_F(HttpServerTest, CompletionsAnswerVllmsPromptLogprobsAndRefuseThemOutOfRange) {
  Start(HttpServerOptions());
  Client client(port());
  ASSERT_TRUE(client.Send(Post("/v1/completions",
                               R"({"prompt": [5, 6, 7, 8], "max_tokens": 1, "temperature": 0,
                                   "prompt_logprobs": 2})",
                               "Connection: close\r\n")));
  const std::string reply = client.ReadToEnd();
  ASSERT_TRUE(absl::StartsWith(reply, "HTTP/1.1 200")) << reply;
  const nlohmann::json body = nlohmann::json::parse(reply.substr(reply.find("\r\n\r\n") + 4));
  const nlohmann::json& prompt = body["choices"][0]["prompt_logprobs"];
  ASSERT_EQ(prompt.size(), 4u) << body;
  EXPECT_TRUE(prompt[0].is_null());
  const int tokens[] = {5, 6, 7, 8};
  for (size_t p = 1; p < prompt.size(); ++p) {
    const nlohmann::json& position = prompt[p];
    ASSERT_TRUE(position.contains(std::to_string(tokens[p]))) << position;
    int ranked = 0;
    for (const auto& [id, entry] : position.items()) {
      EXPECT_LE(entry["logprob"].get<double>(), 0.0);
      ranked += entry.contains("rank");
    }
    EXPECT_EQ(ranked, 2) << position;
  }
  Client refused(port());
  ASSERT_TRUE(refused.Send(Post("/v1/completions", R"({"prompt": [5, 6], "prompt_logprobs": 21})",
                                "Connection: close\r\n")));
  const std::string error = refused.ReadToEnd();
  EXPECT_TRUE(absl::StartsWith(error, "HTTP/1.1 400")) << error;
  EXPECT_TRUE(absl::StrContains(error, "prompt_logprobs")) << error;
}

TEST_F(HttpServerTest, AClientThatStopsReadingIsDroppedAndItsRequestAborted) {
  HttpServerOptions options;
  options.max_stream_buffer_bytes = 8 << 10;
  options.socket_send_buffer_bytes = 16 << 10;
  Start(options, absl::Milliseconds(10));
  // A small receive window, and no reads: the stream backs up in the server.
  Client client(port(), /*receive_buffer=*/4096);
  ASSERT_TRUE(client.Send(Post("/v1/completions",
                               R"({"prompt": [5, 6, 7], "max_tokens": 250, "ignore_eos": true,
                                   "logprobs": 20, "stream": true})")));
  for (int i = 0; i < 100 && engine_->snapshot().num_in_flight == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(engine_->snapshot().num_in_flight, 1);
  // 250 steps of 10 ms would take 2.5 s; dropped, the request ends sooner.
  EXPECT_TRUE(EngineIdleWithin(absl::Milliseconds(1500)));
  const std::string seen = client.ReadToEnd();
  EXPECT_TRUE(absl::StartsWith(seen, "HTTP/1.1 200")) << seen.substr(0, 200);
  EXPECT_FALSE(absl::StrContains(seen, "[DONE]"));  // Cut, not finished.
}

TEST_F(HttpServerTest, AClientThatLeavesAWholeRequestHasItAborted) {
  Start(HttpServerOptions(), absl::Milliseconds(5));
  Client client(port());
  ASSERT_TRUE(client.Send(
      Post("/v1/completions", R"({"prompt": [5, 6, 7], "max_tokens": 250, "ignore_eos": true})")));
  for (int i = 0; i < 100 && engine_->snapshot().num_in_flight == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(engine_->snapshot().num_in_flight, 1);
  client.Close();
  EXPECT_TRUE(EngineIdleWithin(absl::Milliseconds(500)));
}

// --http-io-threads' bound, refused before anything starts.
TEST(HttpServerOptionsTest, IoThreadsOutsideTheirBoundAreRefused) {
  EXPECT_TRUE(CheckHttpIoThreads(1).ok());
  EXPECT_TRUE(CheckHttpIoThreads(kMaxHttpIoThreads).ok());
  for (int threads : {0, -1, kMaxHttpIoThreads + 1}) {
    HttpServerOptions options;
    options.io_threads = threads;
    auto server = HttpServer::Start(options, nullptr, nullptr);
    ASSERT_FALSE(server.ok()) << threads;
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(server.status().message(),
                                  absl::StrCat("[1, ", kMaxHttpIoThreads, "], got ", threads)))
        << server.status();
  }
}

// A stream's events after its first go through the io loop's background
// lane: on one io thread, with streams side by side, each still arrives
// whole and in order (the usage in every chunk only grows, to max_tokens).
TEST_F(HttpServerTest, StreamsSideBySideOnOneIoThreadArriveWholeAndInOrder) {
  HttpServerOptions options;
  options.io_threads = 1;
  Start(options);
  constexpr int kClients = 8;
  constexpr int kTokens = 30;
  std::vector<std::unique_ptr<Client>> clients;
  for (int c = 0; c < kClients; ++c) {
    const std::string body = absl::StrCat(
        R"({"prompt": [5, 6, )", 7 + c, R"(], "max_tokens": )", kTokens,
        R"(, "ignore_eos": true, "stream": true,)",
        R"("stream_options": {"include_usage": true, "continuous_usage_stats": true}})");
    clients.push_back(std::make_unique<Client>(port()));
    ASSERT_TRUE(clients.back()->Send(Post("/v1/completions", body, "Connection: close\r\n")));
  }
  for (int c = 0; c < kClients; ++c) {
    const std::string reply = clients[c]->ReadToEnd();
    ASSERT_TRUE(absl::StartsWith(reply, "HTTP/1.1 200")) << reply.substr(0, 200);
    ASSERT_TRUE(absl::StrContains(reply, "data: [DONE]")) << c;
    int last = 0;
    for (absl::string_view line : absl::StrSplit(reply, '\n')) {
      if (!absl::StartsWith(line, "data: {")) continue;
      const nlohmann::json chunk = nlohmann::json::parse(line.substr(6));
      const int tokens = chunk["usage"]["completion_tokens"].get<int>();
      if (!chunk["choices"].empty()) {
        EXPECT_GT(tokens, last) << "client " << c << ": " << line;
      }
      last = tokens;
    }
    EXPECT_EQ(last, kTokens) << "client " << c;
  }
}

TEST_F(HttpServerTest, DrainingRefusesNewCompletionsAndClosesConnections) {
  Start(HttpServerOptions());
  Client client(port());
  server_->SetDraining();
  ASSERT_TRUE(client.Send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  const std::string reply = client.ReadToEnd();
  EXPECT_TRUE(absl::StartsWith(reply, "HTTP/1.1 503")) << reply;
  EXPECT_TRUE(absl::StrContains(reply, "Connection: close")) << reply;
}

}  // namespace
}  // namespace pagoda::scheduler
