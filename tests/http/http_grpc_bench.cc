// bench_http_grpc: the same load through both front doors of one running
// pagoda-server, in one run, so that they can be compared row by row. At
// each concurrency level, that many client threads send --rounds requests
// each (at least --min-requests in all; token-id prompts of --prompt-len, --max-tokens greedy
// tokens, ignore_eos) one after the other, four ways:
//   grpc         pagoda.v1 Generate (unary), one channel shared by all clients
//   grpc-stream  pagoda.v1 GenerateStream, same channel
//   http         POST /v1/completions, whole JSON answer, one keep-alive
//                connection per client
//   http-stream  the same with "stream": true (SSE), usage in the last event
// and prints requests/s, output tokens/s, time to first token p50/p99 (the
// first message or event carrying a token; for whole answers, the answer)
// and, with --server-pid, the server process's CPU time per output token;
// with --repeat N, each row is the median of N runs, the modes taking turns.
// The clients are alike (one thread each, blocking calls) so that the
// difference is the server's. Not a test: a measuring tool (docs/api.md).
//
//   bench_http_grpc --grpc 127.0.0.1:PORT --http-port PORT [--server-pid PID]
//       [--concurrency 1,16,64,256] [--rounds 4] [--prompt-len 32]
//       [--max-tokens 64] [--modes grpc,grpc-stream,http,http-stream]

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "boost/asio/connect.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http/parser.hpp"
#include "boost/beast/http/read.hpp"
#include "boost/beast/http/string_body.hpp"
#include "boost/beast/http/write.hpp"
#include "common/flags.h"
#include "grpcpp/grpcpp.h"
#include "pagoda/v1/generation.grpc.pb.h"

ABSL_FLAG(std::string, grpc, "127.0.0.1:50051", "pagoda-server's gRPC address.");
ABSL_FLAG(int, http_port, 0, "pagoda-server's --http-port (on 127.0.0.1).");
ABSL_FLAG(int, server_pid, 0, "When set, the server's CPU time per output token is shown.");
ABSL_FLAG(std::string, concurrency, "1,16,64,256", "Comma-separated numbers of clients.");
ABSL_FLAG(int, rounds, 4, "Requests each client sends, one after the other.");
ABSL_FLAG(int, min_requests, 256,
          "At least this many requests per level (more rounds at low concurrency, so that "
          "every row runs long enough to measure).");
ABSL_FLAG(int, prompt_len, 32, "Prompt tokens per request.");
ABSL_FLAG(int, max_tokens, 64, "Output tokens per request.");
ABSL_FLAG(int, vocab_size, 300, "Prompt token ids are drawn below this.");
ABSL_FLAG(int, repeat, 1,
          "Runs of each row, the modes taking turns; the run with the median output tokens/s "
          "is shown (a shared host's drift then falls on every mode alike).");
ABSL_FLAG(std::string, modes, "grpc,grpc-stream,http,http-stream", "Which ways to send.");

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using Clock = std::chrono::steady_clock;

// One request's outcome.
struct Outcome {
  bool ok = false;
  int64_t tokens = 0;
  double ttft_ms = 0;
};

std::vector<int> Prompt(int client, int round) {
  std::vector<int> ids;
  const int vocab = absl::GetFlag(FLAGS_vocab_size);
  for (int i = 0; i < absl::GetFlag(FLAGS_prompt_len); ++i) {
    ids.push_back(3 + (i * 31 + client * 7 + round * 13) % (vocab - 3));
  }
  return ids;
}

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// A pagoda.v1 client: one call at a time on a shared channel.
class GrpcClient {
 public:
  GrpcClient(std::shared_ptr<grpc::Channel> channel, bool stream)
      : stub_(pagoda::v1::Generation::NewStub(std::move(channel))), stream_(stream) {}

  Outcome Send(const std::vector<int>& prompt) {
    pagoda::v1::GenerateRequest request;
    for (int id : prompt) request.add_prompt_token_ids(id);
    request.mutable_stopping()->set_max_tokens(absl::GetFlag(FLAGS_max_tokens));
    request.mutable_stopping()->set_ignore_eos(true);
    request.mutable_sampling()->set_temperature(0);
    grpc::ClientContext context;
    Outcome outcome;
    const Clock::time_point start = Clock::now();
    pagoda::v1::GenerateResponse response;
    if (!stream_) {
      outcome.ok = stub_->Generate(&context, request, &response).ok();
      outcome.ttft_ms = MsSince(start);
      for (const auto& output : response.outputs()) outcome.tokens += output.token_ids_size();
      return outcome;
    }
    auto reader = stub_->GenerateStream(&context, request);
    while (reader->Read(&response)) {
      for (const auto& output : response.outputs()) {
        if (outcome.tokens == 0 && output.token_ids_size() > 0) outcome.ttft_ms = MsSince(start);
        outcome.tokens += output.token_ids_size();
      }
    }
    outcome.ok = reader->Finish().ok();
    return outcome;
  }

 private:
  std::unique_ptr<pagoda::v1::Generation::Stub> stub_;
  const bool stream_;
};

// The integer after the last `"completion_tokens":` in `text`, or 0.
int64_t CompletionTokens(const std::string& text) {
  const size_t at = text.rfind("\"completion_tokens\":");
  int64_t tokens = 0;
  if (at == std::string::npos) return 0;
  const size_t begin = at + 20;
  const size_t end = text.find_first_not_of("0123456789 ", begin);
  return absl::SimpleAtoi(text.substr(begin, end - begin), &tokens) ? tokens : 0;
}

// An OpenAI client on one keep-alive connection, blocking, as pools of the
// OpenAI SDKs use theirs.
class HttpClient {
 public:
  HttpClient(int port, bool stream) : socket_(io_), stream_(stream) {
    socket_.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    socket_.set_option(asio::ip::tcp::no_delay(true));
  }

  Outcome Send(const std::vector<int>& prompt) {
    std::string body = R"({"model":"tiny","prompt":[)";
    for (size_t i = 0; i < prompt.size(); ++i) absl::StrAppend(&body, i ? "," : "", prompt[i]);
    absl::StrAppend(&body, R"(],"max_tokens":)", absl::GetFlag(FLAGS_max_tokens),
                    R"(,"temperature":0,"ignore_eos":true)",
                    stream_ ? R"(,"stream":true,"stream_options":{"include_usage":true}})" : "}");
    http::request<http::string_body> request(http::verb::post, "/v1/completions", 11);
    request.set(http::field::host, "127.0.0.1");
    request.set(http::field::content_type, "application/json");
    request.body() = std::move(body);
    request.prepare_payload();
    Outcome outcome;
    const Clock::time_point start = Clock::now();
    beast::error_code error;
    http::write(socket_, request, error);
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    while (!error && !parser.is_done()) {
      http::read_some(socket_, buffer_, parser, error);
      if (outcome.ttft_ms > 0) continue;
      // A stream's first event carries the first token; a whole answer, all.
      const bool first =
          stream_ ? parser.get().body().find("\"text\"") != std::string::npos : parser.is_done();
      if (first) outcome.ttft_ms = MsSince(start);
    }
    outcome.ok = !error && parser.get().result_int() == 200;
    outcome.tokens = outcome.ok ? CompletionTokens(parser.get().body()) : 0;
    return outcome;
  }

 private:
  asio::io_context io_;
  asio::ip::tcp::socket socket_;
  beast::flat_buffer buffer_;
  const bool stream_;
};

// utime + stime of `pid`, in seconds; 0 without a pid.
double CpuSeconds(int pid) {
  if (pid <= 0) return 0;
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces), from field 3.
  const std::vector<std::string> fields = absl::StrSplit(text.substr(text.rfind(')') + 2), ' ');
  double utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtod(fields[11], &utime) ||
      !absl::SimpleAtod(fields[12], &stime)) {
    return 0;
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

struct LevelResult {
  int requests = 0, errors = 0;
  int64_t tokens = 0;
  double wall_seconds = 0, cpu_seconds = 0;
  std::vector<double> ttfts;
};

// `concurrency` clients made by `make_client`, each sending --rounds requests.
template <typename MakeClient>
LevelResult RunLevel(int concurrency, MakeClient make_client) {
  LevelResult result;
  absl::Mutex mu;
  const int pid = absl::GetFlag(FLAGS_server_pid);
  std::vector<std::thread> clients;
  // Connections first (not timed), then every client starts at once.
  std::vector<decltype(make_client())> made;
  for (int c = 0; c < concurrency; ++c) made.push_back(make_client());
  const double cpu_before = CpuSeconds(pid);
  const absl::Time start = absl::Now();
  const int total =
      std::max(concurrency * absl::GetFlag(FLAGS_rounds), absl::GetFlag(FLAGS_min_requests));
  int taken = 0;
  for (int c = 0; c < concurrency; ++c) {
    clients.emplace_back([&, c] {
      for (int round = 0;; ++round) {
        {
          absl::MutexLock lock(&mu);
          if (taken == total) return;
          ++taken;
        }
        const Outcome outcome = made[c]->Send(Prompt(c, round));
        absl::MutexLock lock(&mu);
        ++result.requests;
        result.errors += outcome.ok ? 0 : 1;
        result.tokens += outcome.tokens;
        if (outcome.ok) result.ttfts.push_back(outcome.ttft_ms);
      }
    });
  }
  for (std::thread& client : clients) client.join();
  result.wall_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  result.cpu_seconds = CpuSeconds(pid) - cpu_before;
  return result;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<size_t>(values.size() * p))];
}

// The run with the median output tokens/s.
LevelResult Median(std::vector<LevelResult> runs) {
  auto rate = [](const LevelResult& r) { return r.tokens / r.wall_seconds; };
  std::sort(runs.begin(), runs.end(),
            [&](const LevelResult& a, const LevelResult& b) { return rate(a) < rate(b); });
  return runs[runs.size() / 2];
}

void PrintRow(const std::string& mode, int concurrency, const LevelResult& r) {
  const double cpu_us = r.tokens > 0 ? 1e6 * r.cpu_seconds / r.tokens : 0;
  std::printf("%-12s %11d %8d %6d %8lld %7.2f %8.1f %10.0f %11.2f %11.2f %10.1f\n", mode.c_str(),
              concurrency, r.requests, r.errors, static_cast<long long>(r.tokens), r.wall_seconds,
              r.requests / r.wall_seconds, r.tokens / r.wall_seconds, Percentile(r.ttfts, 0.5),
              Percentile(r.ttfts, 0.99), cpu_us);
  std::fflush(stdout);
}

LevelResult RunMode(const std::string& mode, int concurrency,
                    const std::shared_ptr<grpc::Channel>& channel) {
  const int port = absl::GetFlag(FLAGS_http_port);
  if (mode == "grpc" || mode == "grpc-stream") {
    const bool stream = mode == "grpc-stream";
    return RunLevel(concurrency, [&] { return std::make_unique<GrpcClient>(channel, stream); });
  }
  const bool stream = mode == "http-stream";
  return RunLevel(concurrency, [&] { return std::make_unique<HttpClient>(port, stream); });
}

}  // namespace

int main(int argc, char** argv) {
  pagoda::ParsePagodaCommandLine(
      argc, argv, {"bench_http_grpc", "bench_http_grpc [flags]: HTTP vs gRPC on one server"});
  const std::optional<std::vector<int>> levels =
      pagoda::ParsePositiveIntList(absl::GetFlag(FLAGS_concurrency));
  const std::vector<std::string> modes = absl::StrSplit(absl::GetFlag(FLAGS_modes), ',');
  for (const std::string& mode : modes) {
    if (mode != "grpc" && mode != "grpc-stream" && mode != "http" && mode != "http-stream") {
      std::fprintf(stderr, "bench_http_grpc: unknown mode '%s'\n", mode.c_str());
      return 1;
    }
  }
  if (!levels || (absl::GetFlag(FLAGS_http_port) <= 0 &&
                  absl::StrContains(absl::GetFlag(FLAGS_modes), "http"))) {
    std::fprintf(stderr, "bench_http_grpc: --concurrency N,... and --http-port are needed\n");
    return 1;
  }
  auto channel = grpc::CreateChannel(absl::GetFlag(FLAGS_grpc), grpc::InsecureChannelCredentials());
  std::printf("prompt %d tokens, %d output tokens, %d rounds per client (at least %d requests)\n",
              absl::GetFlag(FLAGS_prompt_len), absl::GetFlag(FLAGS_max_tokens),
              absl::GetFlag(FLAGS_rounds), absl::GetFlag(FLAGS_min_requests));
  std::printf("%-12s %11s %8s %6s %8s %7s %8s %10s %11s %11s %10s\n", "mode", "concurrency",
              "requests", "errors", "out_tok", "wall_s", "req/s", "out_tok/s", "ttft_p50_ms",
              "ttft_p99_ms", "cpu_us/tok");
  for (const std::string& mode : modes) RunMode(mode, 1, channel);  // Warm-up, not shown.
  const int repeat = std::max(1, absl::GetFlag(FLAGS_repeat));
  for (int concurrency : *levels) {
    std::vector<std::vector<LevelResult>> runs(modes.size());
    for (int r = 0; r < repeat; ++r) {
      for (size_t m = 0; m < modes.size(); ++m) {
        runs[m].push_back(RunMode(modes[m], concurrency, channel));
      }
    }
    for (size_t m = 0; m < modes.size(); ++m) PrintRow(modes[m], concurrency, Median(runs[m]));
  }
  return 0;
}
