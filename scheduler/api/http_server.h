#ifndef PAGODA_SCHEDULER_API_HTTP_SERVER_H_
#define PAGODA_SCHEDULER_API_HTTP_SERVER_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "scheduler/api/openai_protocol.h"
#include "scheduler/api/request_validation.h"
#include "scheduler/engine/engine.h"
#include "text/tokenizer.h"

namespace httplib {
class Server;
}

namespace pagoda::scheduler {

// Renders chat messages into a prompt (the model's chat template).
using ChatRenderer = std::function<absl::StatusOr<std::string>(
    const std::vector<ChatMessage>& messages, bool add_generation_prompt)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0 = the OS picks one.
  std::string model_name;
  int max_model_len = 0;
  int threads = 16;                 // Concurrent connections served.
  size_t max_body_bytes = 4 << 20;  // Larger bodies get 413.
  int read_timeout_seconds = 30;    // A client that stalls its request.
  // When set, every /v1/ call needs "Authorization: Bearer <api_key>" (401
  // otherwise); /health is exempt.
  std::string api_key;
  // On Shutdown, how long responses still being written (after the engine
  // drained) get before their connections are closed.
  absl::Duration shutdown_grace = absl::Seconds(5);
};

// OpenAI-compatible HTTP beside gRPC: POST /v1/completions and
// /v1/chat/completions (JSON or SSE streams), GET /v1/models and /health.
// Requests take the gRPC path: the same RequestValidator, engine submission
// (MakeEngineRequest), stop strings and abort on disconnect (a request whose
// client closed the connection is aborted, freeing its blocks: a stream when
// it next looks for news or writes, a whole response within 50 ms). Errors
// are OpenAI's JSON error shape.
//
// Why cpp-httplib (Debian's libcpp-httplib-dev): it is Debian-packaged, small,
// and serves each connection on a thread from a bounded pool, which suits
// SSE: a stream's thread simply waits for the engine's next delta. Limits:
// `threads` connections at a time, `max_body_bytes` per body, and the
// library's 8 KiB bound on the request line and each header line.
// Thread-safe. The engine, validator, tokenizer must outlive the server.
class HttpServer {
 public:
  // `tokenizer` may be null (token-id prompts only); `chat` may be empty
  // (chat completions are then refused with a clear 400).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(HttpServerOptions options,
                                                           Engine* engine,
                                                           RequestValidator* validator,
                                                           const Tokenizer* tokenizer,
                                                           ChatRenderer chat);
  ~HttpServer();  // Shutdown()s.
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  // /health answers 503 from now on; new completions get 503 too (the
  // engine, which stops accepting, says so). Requests in flight go on.
  void SetDraining();
  // Stops listening, gives responses in flight `shutdown_grace` to be
  // written, closes every connection left (idle keep-alive ones included)
  // and waits for the serving threads. Call after the engine has drained or
  // stopped, so that every request has its outcome. Idempotent.
  void Shutdown();

  struct Handlers;  // The routes; opaque outside http_server.cc.

 private:
  HttpServer() = default;

  HttpServerOptions options_;
  std::unique_ptr<httplib::Server> server_;
  std::unique_ptr<Handlers> handlers_;
  std::thread listener_;
  int port_ = 0;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_HTTP_SERVER_H_
