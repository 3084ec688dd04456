#ifndef PAGODA_TESTS_INTEGRATION_TEST_CLIENT_H_
#define PAGODA_TESTS_INTEGRATION_TEST_CLIENT_H_

// Client-side helpers shared by the integration tests:
// requests, streams, health checks, a server's worker processes, metrics.

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "pagoda/v1/generation.grpc.pb.h"

namespace pagoda::testing {

// The vocabulary of the tiny models the integration tests make.
inline constexpr int kTinyModelVocab = 256;

// Whether a tiny model has a tokenizer (SentencePiece), or takes token-id
// prompts only. Tests that send no text leave it out, so that they also run
// under the sanitizers (scripts/sanitizer_tests.sh), whose runtimes cannot
// load SentencePiece (text/sentencepiece_adapter.cc).
enum class TinyTokenizer { kSentencePiece, kNone };

// Writes a tiny random Llama model (vocab kTinyModelVocab, hidden 64, 2
// layers, 4 query / 2 KV heads, f32; bos 1, eos 2) to `dir`.
absl::Status MakeTinyModel(const std::string& dir, int seed = 11,
                           TinyTokenizer tokenizer = TinyTokenizer::kSentencePiece);

// A deterministic prompt of `length` in-vocabulary token ids.
std::vector<int32_t> TestPrompt(int length, int salt);

// max_tokens tokens, ignore_eos; greedy unless `seed` is non-zero (then
// temperature 0.8 with that seed).
pagoda::v1::GenerateRequest TokenRequest(const std::vector<int32_t>& prompt, int max_tokens,
                                         uint64_t seed = 0);

struct UnaryOutcome {
  grpc::Status status;
  pagoda::v1::GenerateResponse response;
};

// One unary Generate call (deadline 120 s).
UnaryOutcome Generate(pagoda::v1::Generation::Stub& stub,
                      const pagoda::v1::GenerateRequest& request);

// GetModelInfo (deadline 5 s); an empty ModelInfo, and a test failure, if it fails.
pagoda::v1::ModelInfo InfoOf(pagoda::v1::Generation::Stub& stub);

struct StreamOutcome {
  grpc::Status status;
  std::vector<int32_t> tokens;  // Concatenated in arrival order.
  int messages = 0;
  // When the first token arrived (read on the stream's own thread, so the
  // order of two streams' first tokens does not depend on a poller's timing).
  absl::Time first_token_at = absl::InfiniteFuture();
};

// Runs one GenerateStream to its end; adds every token received to
// `received` (if not null) as it arrives, and 1 to `started` (if not null)
// when its first token arrives: a stream that has a token was accepted and
// is running, which a test can wait for without scraping metrics.
StreamOutcome RunStream(pagoda::v1::Generation::Stub& stub,
                        const pagoda::v1::GenerateRequest& request,
                        std::atomic<int>* received = nullptr,
                        const std::vector<std::pair<std::string, std::string>>& metadata = {},
                        std::atomic<int>* started = nullptr);

// grpc.health.v1.Health/Check over `channel`: 1 SERVING, 2 NOT_SERVING, -1
// when the call fails.
// Polls `done` every 2 ms until it holds or `timeout` passes; its last answer.
bool WaitFor(const std::function<bool()>& done, absl::Duration timeout);

int HealthStatus(const std::shared_ptr<grpc::Channel>& channel);
int HealthStatus(const std::string& address);

// Process ids of `parent`'s children (from /proc).
std::vector<pid_t> ChildPids(pid_t parent);

// The sum of a metric's samples over every label set, -1 if absent.
double MetricValue(int metrics_port, const std::string& name);

// The requests the server behind `metrics_port` holds or has finished
// since pagoda_request_success_total was `finished_before`: running plus
// waiting plus finished (the engine counts an arrival as waiting at once;
// an absent metric, and a negative `finished_before`, count as 0).
// A test that kills a worker under concurrent streams waits for all of them
// here first: one sent while the workers restart is refused (UNAVAILABLE),
// and on a loaded machine the last client threads start late.
double AcceptedRequests(int metrics_port, double finished_before);

// With openssl, in `dir`: ca.{pem,key}; server.{pem,key} for 127.0.0.1,
// localhost and pagoda-worker (a fixed name, as the Helm chart gives its
// workers) and client.{pem,key}, both signed by the CA; rogue.{pem,key}
// signed by another CA (rogue-ca.pem). Keys are mode 600 (openssl's).
absl::Status MakeCertificates(const std::string& dir);

}  // namespace pagoda::testing

#endif  // PAGODA_TESTS_INTEGRATION_TEST_CLIENT_H_
