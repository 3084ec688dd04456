#ifndef PAGODA_SCHEDULER_API_OPENAI_ROUTES_H_
#define PAGODA_SCHEDULER_API_OPENAI_ROUTES_H_

// OpenAiRoutes: what each HTTP path does (completions, chat completions,
// models, tokenize, health), apart from the connections that carry requests.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "nlohmann/json.hpp"
#include "scheduler/api/http_exchange.h"
#include "scheduler/api/http_server.h"
#include "scheduler/api/request_reactors.h"
#include "scheduler/api/request_validation.h"
#include "scheduler/api/tool_calls.h"
#include "scheduler/api/validation_pool.h"
#include "scheduler/engine/engine.h"
#include "text/tokenizer.h"

namespace pagoda::scheduler {

// The HTTP server's routes, apart from the connections that carry them:
// OpenAI's /v1/completions, /v1/chat/completions, /v1/models[/{id}], vLLM's
// /tokenize, /detokenize, /version, /ping, and /health.
//
// Parsing, chat templates, tokenizing and validation of a request run on a
// small pool (they grow with the prompt); submission, detokenizing and JSON
// of the engine's deltas run on the exchange's executor (the connection's
// strand). The engine's sinks only post there.
// Thread-safe. The collaborators must outlive the routes.
class OpenAiRoutes {
 public:
  OpenAiRoutes(const HttpServerOptions& options, Engine* engine, RequestValidator* validator,
               const Tokenizer* tokenizer, ChatRenderer chat);
  ~OpenAiRoutes();  // Runs the pool's accepted work, then joins it.
  OpenAiRoutes(const OpenAiRoutes&) = delete;
  OpenAiRoutes& operator=(const OpenAiRoutes&) = delete;

  // False when `path` needs the API key (`api_key` set: every /v1/ path)
  // and `authorization` is not "Bearer <api_key>" (compared in constant time).
  static bool Authorized(absl::string_view api_key, absl::string_view path,
                         absl::string_view authorization);
  // Whether `method` `path` names a route; 404 or 405 otherwise (`status`).
  static bool Routable(absl::string_view method, absl::string_view path, int* status);
  // Answers `request` on `exchange`, now or later. Call on exchange's executor.
  void Handle(HttpRequest request, std::shared_ptr<HttpExchange> exchange);

  // The metrics label of `path`: its route, "other" for unknown paths, so
  // that label values stay bounded whatever clients send.
  static absl::string_view RouteLabel(absl::string_view path);
  // Whether Handle answers `route` (a RouteLabel) at once, from what the
  // server knows (health, version, models), without the engine or the
  // tokenizer pool: such requests may be answered on a loop kept for them.
  static bool AnsweredAtOnce(absl::string_view route);

  // Runs the tokenizing work already accepted and joins the pool. Call once
  // no io thread runs (Handle must not be called after).
  void StopPool() { pool_.reset(); }

  void SetDraining() { draining_ = true; }
  bool draining() const { return draining_.load(); }
  // Completion calls from their start until their response is written.
  CallTracker& calls() { return calls_; }

  struct Prepared;  // A parsed and validated completion (openai_routes.cc).

 private:
  // Checks, renders (chat), tokenizes and validates a parsed body.
  // Thread-safe; slow for text prompts.
  // `raw` is the body's text, parsed again keeping key order when it
  // carries a schema (openai_protocol.h).
  // `raw` parsed (json_body.h), then Prepare.
  absl::StatusOr<Prepared> ParseAndPrepare(const std::string& raw, bool chat);
  absl::StatusOr<Prepared> Prepare(const nlohmann::json& body, bool chat, const std::string& raw);
  void Launch(Prepared prepared, std::shared_ptr<HttpExchange> exchange);
  // On the pool: answer on `exchange` (posted to its executor).
  void Tokenize(const std::string& body, std::shared_ptr<HttpExchange> exchange);
  void Detokenize(const std::string& body, std::shared_ptr<HttpExchange> exchange);
  // Runs `work` on the pool; 429 on `exchange` when the pool is full.
  void OffLoop(std::shared_ptr<HttpExchange> exchange, std::function<void()> work);
  // NOT_FOUND unless `model` is "" or the served model.
  absl::Status CheckModel(const std::string& model) const;

  const HttpServerOptions options_;
  Engine* const engine_;
  RequestValidator* const validator_;
  const Tokenizer* const tokenizer_;
  const ChatRenderer chat_;
  const ToolCallParser tool_parser_;
  const int64_t started_;
  std::atomic<bool> draining_{false};
  CallTracker calls_;
  std::unique_ptr<ValidationPool> pool_;  // Last: joined before the rest goes.
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_OPENAI_ROUTES_H_
