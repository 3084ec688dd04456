#include "scheduler/api/http_server.h"

#include <atomic>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "scheduler/api/http_connection.h"
#include "scheduler/api/http_request_stream.h"
#include "scheduler/api/request_reactors.h"
#include "wire/worker_secret.h"

namespace pagoda::scheduler {

using nlohmann::json;

namespace {

constexpr char kJson[] = "application/json";

void SendError(httplib::Response& res, const absl::Status& status) {
  res.status = HttpStatusOf(status);
  res.set_content(MakeOpenAiError(status).dump(), kJson);
}

std::string SseEvent(const json& data) {
  return absl::StrCat("data: ", data.dump(-1, ' ', false, json::error_handler_t::replace), "\n\n");
}

// Counts one completion call in the server's CallTracker while alive.
class InFlightCall {
 public:
  explicit InFlightCall(CallTracker* calls) : calls_(calls) { calls_->Begin(); }
  ~InFlightCall() { calls_->End(); }
  InFlightCall(const InFlightCall&) = delete;
  InFlightCall& operator=(const InFlightCall&) = delete;

 private:
  CallTracker* const calls_;
};

// What one response keeps until it is written: for a stream, between calls
// of its content provider (the provider's lambdas own it).
struct StreamState {
  OpenAiRequest request;
  std::string request_id;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int64_t created = 0;
  std::vector<bool> role_sent;
  std::shared_ptr<HttpRequestStream> stream;
  bool finished = false;  // The engine's final status was seen.
  std::unique_ptr<InFlightCall> in_flight;
};

}  // namespace

struct HttpServer::Handlers {
  HttpServerOptions options;
  Engine* engine;
  RequestValidator* validator;
  const Tokenizer* tokenizer;
  ChatRenderer chat;
  int64_t started = absl::ToUnixSeconds(absl::Now());
  std::atomic<bool> draining{false};
  // Completion calls from their start until their response is written.
  CallTracker calls;

  void Health(httplib::Response& res) const {
    const bool serving = !draining.load() && engine->healthy();
    res.status = serving ? 200 : 503;
  }

  void Models(httplib::Response& res) const {
    const json model = {{"id", options.model_name},
                        {"object", "model"},
                        {"created", started},
                        {"owned_by", "pagoda"},
                        {"max_model_len", options.max_model_len}};
    res.set_content(json{{"object", "list"}, {"data", json::array({model})}}.dump(), kJson);
  }

  // Parses, renders (chat), validates and submits; fills `res` on failure.
  absl::StatusOr<std::shared_ptr<StreamState>> Submit(const httplib::Request& req, bool chat);
  void Completions(const httplib::Request& req, httplib::Response& res, bool chat);
  // Waits for a non-streamed request's end; aborts it (nullopt) if the
  // client closes the connection first.
  std::optional<absl::StatusOr<pagoda::v1::GenerateResponse>> AwaitWhole(
      const httplib::Request& req, StreamState& state) const;
  bool Provide(StreamState& state, httplib::DataSink& sink) const;
};

absl::StatusOr<std::shared_ptr<StreamState>> HttpServer::Handlers::Submit(
    const httplib::Request& req, bool chat_request) {
  // Invalid UTF-8 or JSON is a parse failure, not an exception.
  const json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return absl::InvalidArgumentError("body: not valid JSON (UTF-8)");
  absl::StatusOr<OpenAiRequest> parsed =
      ParseOpenAiRequest(body, chat_request, options.max_model_len, validator->limits().defaults);
  if (!parsed.ok()) return parsed.status();
  if (parsed->model != options.model_name) {
    return absl::NotFoundError(absl::StrCat("model: `", parsed->model,
                                            "` does not exist; this server serves `",
                                            options.model_name, "`"));
  }
  if (chat_request) {
    if (!chat) {
      return absl::InvalidArgumentError(
          "messages: this model has no chat template; start the server with --chat-template FILE");
    }
    if (tokenizer == nullptr)
      return absl::InvalidArgumentError("messages: the model has no tokenizer");
    absl::StatusOr<std::string> prompt = chat(parsed->messages, parsed->add_generation_prompt);
    if (!prompt.ok()) return prompt.status();
    // The template writes BOS and other special tokens itself, so the prompt
    // goes in as ids (the validator adds BOS only to text prompts).
    absl::StatusOr<std::vector<int>> ids = tokenizer->Encode(*prompt);
    if (!ids.ok()) return ids.status();
    for (int id : *ids) parsed->generate.add_prompt_token_ids(id);
  }
  absl::StatusOr<ValidatedRequest> validated = validator->Validate(parsed->generate);
  if (!validated.ok()) return validated.status();
  auto state = std::make_shared<StreamState>();
  state->request = *std::move(parsed);
  state->request_id = validated->request_id;
  state->prompt_tokens = static_cast<int>(validated->prompt_token_ids.size());
  state->created = absl::ToUnixSeconds(absl::Now());
  state->stream =
      std::make_shared<HttpRequestStream>(engine, MakeRequestOutput(*validated, tokenizer));
  absl::Status accepted = engine->AddRequest(MakeEngineRequest(*validated, state->stream));
  if (!accepted.ok()) return accepted;
  return state;
}

std::optional<absl::StatusOr<pagoda::v1::GenerateResponse>> HttpServer::Handlers::AwaitWhole(
    const httplib::Request& req, StreamState& state) const {
  // Short requests end within the first wait; only longer ones look up the
  // connection (a scan of this process's descriptors) to watch it.
  std::optional<HttpConnection> connection;
  while (true) {
    auto whole = state.stream->Whole(absl::Milliseconds(50));
    if (whole.has_value()) return whole;
    if (!connection.has_value()) {
      connection = HttpConnection::Find(req.local_port, req.remote_addr, req.remote_port);
    }
    if (connection->PeerClosed()) {
      // As gRPC does for a cancelled call: free the blocks at the next step.
      engine->AbortRequest(state.request_id, state.stream.get());
      return std::nullopt;
    }
  }
}

void HttpServer::Handlers::Completions(const httplib::Request& req, httplib::Response& res,
                                       bool chat_request) {
  auto in_flight = std::make_unique<InFlightCall>(&calls);
  absl::StatusOr<std::shared_ptr<StreamState>> submitted = Submit(req, chat_request);
  if (!submitted.ok()) return SendError(res, submitted.status());
  std::shared_ptr<StreamState> state = *std::move(submitted);
  state->in_flight = std::move(in_flight);
  if (!state->request.stream) {
    std::optional<absl::StatusOr<pagoda::v1::GenerateResponse>> whole = AwaitWhole(req, *state);
    if (!whole.has_value()) {
      // Nobody reads this; 499 (nginx's "client closed request") for the log.
      res.status = 499;
      return;
    }
    if (!whole->ok()) return SendError(res, whole->status());
    // Through a provider whose releaser holds `state` (and so the call in
    // flight) until the library has written the body: a shutdown must not
    // close the connection under it.
    auto body = std::make_shared<std::string>(
        MakeOpenAiResponse(state->request, **whole, options.model_name, state->created, tokenizer)
            .dump(-1, ' ', false, json::error_handler_t::replace));
    res.set_content_provider(
        body->size(), kJson,
        [body](size_t offset, size_t length, httplib::DataSink& sink) {
          return sink.write(body->data() + offset, length);
        },
        [state](bool) {});
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, state](size_t, httplib::DataSink& sink) { return Provide(*state, sink); },
      [this, state](bool) {
        // Ended early (client gone, write failed): free the blocks.
        if (!state->finished) engine->AbortRequest(state->request_id, state->stream.get());
      });
}

// Sends the next event of a stream; false ends the connection.
bool HttpServer::Handlers::Provide(StreamState& state, httplib::DataSink& sink) const {
  std::optional<HttpRequestStream::Event> event = state.stream->Next(absl::Milliseconds(200));
  if (!event.has_value()) return sink.is_writable();  // Nothing yet; is the client still there?
  if (event->message.has_value()) {
    for (const auto& output : event->message->outputs()) {
      state.completion_tokens += output.token_ids_size();
    }
    const json chunk = MakeOpenAiChunk(state.request, *event->message, options.model_name,
                                       state.created, tokenizer, &state.role_sent);
    if (chunk.is_null()) return true;
    const std::string data = SseEvent(chunk);
    return sink.write(data.data(), data.size());
  }
  state.finished = true;
  std::string tail;
  if (!event->status.ok()) {
    tail = SseEvent(MakeOpenAiError(event->status));
  } else if (state.request.include_usage) {
    tail =
        SseEvent(MakeOpenAiUsageChunk(state.request, state.request_id, state.prompt_tokens,
                                      state.completion_tokens, options.model_name, state.created));
  }
  tail += "data: [DONE]\n\n";
  const bool ok = sink.write(tail.data(), tail.size());
  sink.done();
  return ok;
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(HttpServerOptions options,
                                                              Engine* engine,
                                                              RequestValidator* validator,
                                                              const Tokenizer* tokenizer,
                                                              ChatRenderer chat) {
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->options_ = options;
  server->handlers_.reset(new Handlers{options, engine, validator, tokenizer, std::move(chat)});
  server->server_ = std::make_unique<httplib::Server>();
  httplib::Server& http = *server->server_;
  Handlers* handlers = server->handlers_.get();
  const int threads = options.threads;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(options.max_body_bytes);
  http.set_read_timeout(options.read_timeout_seconds, 0);
  http.set_keep_alive_max_count(100);
  // --api-key guards every /v1/ route, as on gRPC; /health stays open for
  // probes. Checked before routing, so a refused call reads no body.
  if (!options.api_key.empty()) {
    const std::string expected = absl::StrCat("Bearer ", options.api_key);
    http.set_pre_routing_handler([expected](const httplib::Request& req, httplib::Response& res) {
      if (!absl::StartsWith(req.path, "/v1/") ||
          ConstantTimeEquals(expected, req.get_header_value("Authorization"))) {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      SendError(res, absl::UnauthenticatedError(
                         "missing or wrong API key: send 'Authorization: Bearer <key>'"));
      return httplib::Server::HandlerResponse::Handled;
    });
  }
  http.Get("/health",
           [handlers](const httplib::Request&, httplib::Response& res) { handlers->Health(res); });
  http.Get("/v1/models",
           [handlers](const httplib::Request&, httplib::Response& res) { handlers->Models(res); });
  http.Post("/v1/completions", [handlers](const httplib::Request& req, httplib::Response& res) {
    handlers->Completions(req, res, /*chat=*/false);
  });
  http.Post("/v1/chat/completions",
            [handlers](const httplib::Request& req, httplib::Response& res) {
              handlers->Completions(req, res, /*chat=*/true);
            });
  // Library-made errors (unknown path 404, body too large 413, ...) in
  // OpenAI's shape too.
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const absl::Status status(
        res.status == 404 ? absl::StatusCode::kNotFound : absl::StatusCode::kInvalidArgument,
        absl::StrCat(req.method, " ", req.path, ": HTTP ", res.status));
    res.set_content(MakeOpenAiError(status).dump(), kJson);
  });
  server->port_ = options.port == 0
                      ? http.bind_to_any_port(options.host)
                      : (http.bind_to_port(options.host, options.port) ? options.port : -1);
  if (server->port_ <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for HTTP on ", options.host, ":", options.port));
  }
  server->listener_ = std::thread([&http] { http.listen_after_bind(); });
  return server;
}

HttpServer::~HttpServer() { Shutdown(); }

void HttpServer::SetDraining() { handlers_->draining = true; }

void HttpServer::Shutdown() {
  if (server_ == nullptr || !listener_.joinable()) return;
  // Responses in flight get `shutdown_grace` to reach their clients before
  // the listener stops: once stopped, the library ends a chunked (streamed)
  // response at its next chunk, cutting a stream whose last events are still
  // on their way. New requests meanwhile get 503 (the server is draining).
  // Then every connection still open is closed: idle keep-alive ones, which
  // the library would otherwise wait out (its keep-alive timeout), and
  // clients that stopped reading.
  handlers_->draining = true;
  if (!handlers_->calls.WaitUntilIdle(options_.shutdown_grace)) {
    LOG(WARNING) << "HTTP: closing connections whose responses are still being written";
  }
  server_->stop();  // No new connections.
  for (const HttpConnection& connection : HttpConnection::AllOnPort(port_)) {
    connection.ShutDown();
  }
  listener_.join();
}

}  // namespace pagoda::scheduler
