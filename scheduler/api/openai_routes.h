// The OpenAI HTTP front door's routes: OpenAI's and vLLM's JSON over the
// one request path.
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
#include "scheduler/api/call_tracker.h"
#include "scheduler/api/chat_renderer.h"
#include "scheduler/api/completion_call.h"
#include "scheduler/api/http_exchange.h"
#include "scheduler/api/http_server_options.h"
#include "scheduler/api/request_path.h"
#include "scheduler/api/tool_calls.h"

namespace pagoda::scheduler {

// The HTTP server's routes, apart from the connections that carry them:
// OpenAI's /v1/completions, /v1/chat/completions, /v1/models[/{id}], vLLM's
// /tokenize, /detokenize, /version, /ping, /v1/load_lora_adapter,
// /v1/unload_lora_adapter, and /health.
//
// Parsing, chat templates, tokenizing and validation of a request run on the
// request path's pool (they grow with the prompt); submission, detokenizing and JSON
// of the engine's deltas run on the exchange's executor (the connection's
// strand). The engine's sinks only post there.
// Thread-safe. The collaborators must outlive the routes.
class OpenAiRoutes {
 public:
  OpenAiRoutes(const HttpServerOptions& options, RequestPath* path, ChatRenderer chat);
  ~OpenAiRoutes();  // Waits for the work it handed to the path's pool (StopPool).
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

  // Waits until the tokenizing work these routes handed to the path's pool
  // has run. Call once no io thread runs (Handle must not be called after).
  void StopPool() { pending_validations_.WaitUntilIdle(absl::InfiniteDuration()); }

  void SetDraining() { draining_ = true; }
  bool draining() const { return draining_.load(); }
  // Completion calls from their start until their response is written.
  CallTracker& calls() { return calls_; }

  using Prepared = PreparedCompletion;

 private:
  // Checks, renders (chat), tokenizes and validates a parsed body.
  // Thread-safe; slow for text prompts.
  // `raw` is the body's text, parsed again keeping key order when it
  // carries a schema (openai_protocol.h).
  // `raw` parsed (json_body.h), then Prepare.
  absl::StatusOr<Prepared> ParseAndPrepare(const std::string& raw, bool chat);
  absl::StatusOr<Prepared> Prepare(const nlohmann::json& body, bool chat, const std::string& raw);
  // Chat: renders `request`'s messages with the template and tokenizes them
  // into its prompt ids.
  absl::Status RenderChatPrompt(OpenAiRequest& request) const;
  void Launch(Prepared prepared, std::shared_ptr<HttpExchange> exchange);
  // On the pool: answer on `exchange` (posted to its executor).
  void Tokenize(const std::string& body, std::shared_ptr<HttpExchange> exchange);
  void Detokenize(const std::string& body, std::shared_ptr<HttpExchange> exchange);
  // Runs `work` on the path's pool; 429 on `exchange` when it is full.
  void OffLoop(std::shared_ptr<HttpExchange> exchange, std::function<void()> work);
  // Whether `name` is one of the base model's served names.
  bool IsModelName(absl::string_view name) const;
  // The LoRA adapter `model` names ("" = the base model); NOT_FOUND unless
  // `model` is "", a served name of the model or a served adapter.
  absl::StatusOr<std::string> AdapterFor(const std::string& model) const;
  absl::Status CheckModel(const std::string& model) const;
  // GET /v1/models and /v1/models/{id}: the served model under each of its
  // names, then its LoRA adapters.
  void AnswerModels(absl::string_view route, const std::string& path, HttpExchange& exchange) const;
  // vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter (LoraAdapters).
  void ChangeAdapters(absl::string_view route, HttpRequest request,
                      std::shared_ptr<HttpExchange> exchange);

  const HttpServerOptions options_;
  RequestPath* const path_;
  const Tokenizer* const tokenizer_;
  const ChatRenderer chat_;
  const ToolCallParser tool_parser_;
  const int64_t started_;
  std::atomic<bool> draining_{false};
  CallTracker calls_;
  CallTracker pending_validations_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_OPENAI_ROUTES_H_
