#include "scheduler/api/openai_routes.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "boost/asio/dispatch.hpp"
#include "boost/asio/post.hpp"
#include "nlohmann/json.hpp"
#include "scheduler/api/json_body.h"
#include "scheduler/api/request_output.h"
#include "wire/worker_secret.h"

#ifndef PAGODA_VERSION
#define PAGODA_VERSION "unknown"
#endif

namespace pagoda::scheduler {

using nlohmann::json;

namespace {

constexpr absl::string_view kJson = "application/json";
constexpr absl::string_view kModelsPrefix = "/v1/models/";

std::string Dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

void RespondError(HttpExchange& exchange, const absl::Status& status) {
  exchange.Respond(HttpStatusOf(status), kJson, Dump(MakeOpenAiError(status)));
}

// Bodies up to this size with token-id prompts are handled on the loop.
constexpr size_t kInlineBodyBytes = 16 << 10;

// Whether a parsed completions body has text to tokenize (a text prompt or
// a list holding one); malformed bodies do not (their error is cheap).
bool NeedsTokenizer(const json& body) {
  if (!body.is_object() || !body.contains("prompt")) return false;
  const json& prompt = body["prompt"];
  if (prompt.is_string()) return true;
  if (!prompt.is_array()) return false;
  for (const json& entry : prompt) {
    if (entry.is_string()) return true;
  }
  return false;
}

std::string SseEvent(const json& data) { return absl::StrCat("data: ", Dump(data), "\n\n"); }

// Counts one completion call in the routes' CallTracker while alive.
class InFlightCall {
 public:
  explicit InFlightCall(CallTracker* calls) : calls_(calls) { calls_->Begin(); }
  ~InFlightCall() { calls_->End(); }
  InFlightCall(const InFlightCall&) = delete;
  InFlightCall& operator=(const InFlightCall&) = delete;

 private:
  CallTracker* const calls_;
};

json UsageJson(int prompt_tokens, int completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

}  // namespace

struct OpenAiRoutes::Prepared {
  OpenAiRequest request;
  std::vector<ValidatedRequest> validated;  // One per prompt.
  std::vector<std::string> echo;            // Per prompt, when request.echo.
};

namespace {

// One completion call: one engine request per prompt, answered as one
// response (JSON or SSE) whose choices are numbered prompt by prompt as
// vLLM does (prompt p, sample k, copy j -> index (p * n + k) * copies + j).
// Lives on its exchange's strand: every method runs there.
class CompletionCall : public HttpCall, public std::enable_shared_from_this<CompletionCall> {
 public:
  CompletionCall(Engine* engine, const Tokenizer* tokenizer, std::string model,
                 OpenAiRoutes::Prepared prepared, std::shared_ptr<HttpExchange> exchange,
                 CallTracker* calls)
      : engine_(engine),
        tokenizer_(tokenizer),
        model_(std::move(model)),
        request_(std::move(prepared.request)),
        echo_(std::move(prepared.echo)),
        exchange_(std::move(exchange)),
        in_flight_(calls),
        created_(absl::ToUnixSeconds(absl::Now())) {
    validated_ = std::move(prepared.validated);
  }

  // Submits every prompt; on a refusal aborts those already submitted and
  // answers the error.
  void Start();
  void OnDelta(size_t part, const RequestDelta& delta);
  void OnFinish(size_t part, const absl::Status& status);
  void OnClientGone() override { AbortAll(); }

 private:
  // What the engine sends goes to the strand; nothing else on its thread.
  // Deltas queue here and one post carries all that arrived before the
  // strand took them: under load (the loop behind the engine) a request
  // costs one wake-up per burst rather than one per token. The first
  // delivery (the first token, or a whole answer) goes straight to the
  // loop's queue; later ones go through the loop's background lane, so
  // that running streams never hold back another request's first token.
  class Sink : public RequestSink, public std::enable_shared_from_this<Sink> {
   public:
    // `eager`: deliver each delta as it comes (a stream, or stop strings
    // that must end the request early); otherwise the deltas wait for the
    // end, and a whole response costs the loop one wake-up.
    Sink(HttpExchange& exchange, std::weak_ptr<CompletionCall> call, size_t part, bool eager)
        : executor_(exchange.executor()),
          background_(&exchange.background()),
          call_(std::move(call)),
          part_(part),
          eager_(eager) {}
    void OnDelta(const RequestDelta& delta) override {
      absl::MutexLock lock(&mu_);
      deltas_.push_back(delta);
      if (eager_) ScheduleLocked();
    }
    void OnFinish(const absl::Status& status) override {
      absl::MutexLock lock(&mu_);
      final_status_ = status;
      ScheduleLocked();
    }

   private:
    void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (scheduled_) return;
      scheduled_ = true;
      if (!delivered_) {
        delivered_ = true;
        boost::asio::post(executor_, [self = shared_from_this()] { self->Deliver(); });
        return;
      }
      background_->Post([self = shared_from_this()] {
        boost::asio::dispatch(self->executor_, [self] { self->Deliver(); });
      });
    }
    // On the strand: hands the queued deltas (then the end) to the call.
    void Deliver() {
      std::vector<RequestDelta> deltas;
      std::optional<absl::Status> final_status;
      {
        absl::MutexLock lock(&mu_);
        deltas.swap(deltas_);
        final_status = final_status_;  // After every delta: the engine sends it last.
        scheduled_ = false;
      }
      std::shared_ptr<CompletionCall> call = call_.lock();
      if (call == nullptr) return;
      call->exchange_->HoldWrites();  // The burst leaves in one write.
      for (const RequestDelta& delta : deltas) call->OnDelta(part_, delta);
      if (final_status.has_value()) call->OnFinish(part_, *final_status);
      call->exchange_->ReleaseWrites();
    }

    const boost::asio::any_io_executor executor_;
    BackgroundLane* const background_;  // Lives as long as executor_'s loop.
    const std::weak_ptr<CompletionCall> call_;
    const size_t part_;
    const bool eager_;
    absl::Mutex mu_;
    std::vector<RequestDelta> deltas_ ABSL_GUARDED_BY(mu_);
    std::optional<absl::Status> final_status_ ABSL_GUARDED_BY(mu_);
    bool scheduled_ ABSL_GUARDED_BY(mu_) = false;
    bool delivered_ ABSL_GUARDED_BY(mu_) = false;  // The first delivery was scheduled.
  };

  struct Part {
    std::string request_id;
    std::shared_ptr<Sink> sink;
    std::unique_ptr<RequestOutput> output;
    int prompt_tokens = 0;
    std::vector<int32_t> prompt_token_ids;  // With echo and logprobs only.
    int completion_tokens = 0;  // Engine tokens (copies not counted).
    std::vector<ChoiceStream> streams;
    bool finished = false;
  };

  int SamplesPerPrompt() const { return std::max(1, request_.generate.sampling().n()); }
  // `choices` of part `part` renumbered, each repeated `copies` times.
  json Renumber(size_t part, const json& choices) const;
  int PromptTokens() const;
  int CompletionTokens() const;
  void AbortAll();
  void Fail(const absl::Status& status);
  void FinishWhole();
  void FinishStream();

  Engine* const engine_;
  const Tokenizer* const tokenizer_;
  const std::string model_;
  const OpenAiRequest request_;
  const std::vector<std::string> echo_;
  std::vector<ValidatedRequest> validated_;
  const std::shared_ptr<HttpExchange> exchange_;
  InFlightCall in_flight_;
  const int64_t created_;
  std::vector<Part> parts_;
  size_t finished_parts_ = 0;
  bool ended_ = false;  // The response (or the failure) has been sent.
};

json CompletionCall::Renumber(size_t part, const json& choices) const {
  json out = json::array();
  for (const json& choice : choices) {
    const int sample = choice.value("index", 0);
    for (int copy = 0; copy < request_.copies; ++copy) {
      json renumbered = choice;
      renumbered["index"] =
          (static_cast<int>(part) * SamplesPerPrompt() + sample) * request_.copies + copy;
      out.push_back(std::move(renumbered));
    }
  }
  return out;
}

int CompletionCall::PromptTokens() const {
  int total = 0;
  for (const Part& part : parts_) total += part.prompt_tokens;
  return total;
}

int CompletionCall::CompletionTokens() const {
  int total = 0;
  for (const Part& part : parts_) total += part.completion_tokens;
  return total * request_.copies;  // vLLM generates (and counts) each copy.
}

void CompletionCall::Start() {
  parts_.resize(validated_.size());
  for (size_t i = 0; i < validated_.size(); ++i) {
    Part& part = parts_[i];
    part.request_id = validated_[i].request_id;
    part.prompt_tokens = static_cast<int>(validated_[i].prompt_token_ids.size());
    if (request_.echo && request_.top_logprobs >= 0) {
      part.prompt_token_ids = validated_[i].prompt_token_ids;
    }
    part.output = std::make_unique<RequestOutput>(MakeRequestOutput(validated_[i], tokenizer_));
    part.sink = std::make_shared<Sink>(*exchange_, weak_from_this(), i,
                                       request_.stream || !validated_[i].stop_strings.empty());
  }
  for (size_t i = 0; i < validated_.size(); ++i) {
    absl::Status accepted = engine_->AddRequest(MakeEngineRequest(validated_[i], parts_[i].sink));
    if (!accepted.ok()) {
      // Those submitted before are aborted; their sinks' posts find nobody.
      parts_.resize(i);
      AbortAll();
      ended_ = true;
      RespondError(*exchange_, accepted);
      return;
    }
  }
  validated_.clear();
  if (!request_.stream) return;
  exchange_->StartEventStream();
  // vLLM's echo: a first chunk of each choice with its prompt's text.
  for (size_t p = 0; request_.echo && p < echo_.size(); ++p) {
    json choices = json::array();
    for (int sample = 0; sample < SamplesPerPrompt(); ++sample) {
      choices.push_back({{"index", sample},
                         {"text", echo_[p]},
                         {"logprobs", nullptr},
                         {"finish_reason", nullptr}});
    }
    exchange_->SendEvent(SseEvent({{"id", absl::StrCat("cmpl-", parts_[0].request_id)},
                                   {"object", "text_completion"},
                                   {"created", created_},
                                   {"model", model_},
                                   {"choices", Renumber(p, choices)}}));
  }
}

void CompletionCall::AbortAll() {
  for (Part& part : parts_) {
    if (!part.finished) engine_->AbortRequest(part.request_id, part.sink.get());
  }
}

void CompletionCall::Fail(const absl::Status& status) {
  ended_ = true;
  AbortAll();
  if (request_.stream) {
    exchange_->SendEvent(SseEvent(MakeOpenAiError(status)) + "data: [DONE]\n\n");
    exchange_->EndEventStream();
  } else {
    RespondError(*exchange_, status);
  }
}

void CompletionCall::OnDelta(size_t index, const RequestDelta& delta) {
  if (ended_ || index >= parts_.size()) return;
  Part& part = parts_[index];
  const pagoda::v1::GenerateResponse message = part.output->AddDelta(delta);
  for (const auto& output : message.outputs()) part.completion_tokens += output.token_ids_size();
  // Stop strings ended every sequence: free the blocks now.
  if (part.output->TakeStopAbort()) {
    engine_->AbortRequest(part.request_id, part.sink.get(), Engine::AbortCause::kStopString);
  }
  if (!request_.stream) return;
  json chunk = MakeOpenAiChunk(request_, message, model_, created_, tokenizer_, &part.streams);
  if (chunk.is_null()) return;
  chunk["id"] = absl::StrCat(request_.chat ? "chatcmpl-" : "cmpl-", parts_[0].request_id);
  chunk["choices"] = Renumber(index, chunk["choices"]);
  if (request_.include_usage && request_.continuous_usage_stats) {
    chunk["usage"] = UsageJson(PromptTokens(), CompletionTokens());
  }
  // A client too slow to take its stream is dropped (the exchange closes
  // the connection and calls OnClientGone).
  exchange_->SendEvent(SseEvent(chunk));
}

void CompletionCall::OnFinish(size_t index, const absl::Status& engine_status) {
  if (ended_ || index >= parts_.size() || parts_[index].finished) return;
  Part& part = parts_[index];
  part.finished = true;
  ++finished_parts_;
  const absl::Status status = part.output->FinalStatus(engine_status);
  if (!status.ok()) return Fail(status);
  if (finished_parts_ < parts_.size()) return;
  ended_ = true;
  if (request_.stream) {
    FinishStream();
  } else {
    FinishWhole();
  }
}

void CompletionCall::FinishStream() {
  std::string tail;
  if (request_.include_usage) {
    tail = SseEvent(MakeOpenAiUsageChunk(request_, parts_[0].request_id, PromptTokens(),
                                         CompletionTokens(), model_, created_));
  }
  tail += "data: [DONE]\n\n";
  exchange_->SendEvent(tail);
  exchange_->EndEventStream();
}

void CompletionCall::FinishWhole() {
  json response;
  json choices = json::array();
  for (size_t p = 0; p < parts_.size(); ++p) {
    json one =
        MakeOpenAiResponse(request_, parts_[p].output->whole(), model_, created_, tokenizer_);
    if (p == 0) response = one;
    for (json& choice : Renumber(p, one["choices"])) {
      if (request_.echo && p < echo_.size()) {
        choice["text"] = echo_[p] + choice["text"].get<std::string>();
        PrependPromptLogprobs(request_, parts_[p].prompt_token_ids, parts_[p].output->whole(),
                              tokenizer_, &choice["logprobs"]);
      }
      choices.push_back(std::move(choice));
    }
  }
  response["choices"] = std::move(choices);
  response["usage"] = UsageJson(PromptTokens(), CompletionTokens());
  exchange_->Respond(200, kJson, Dump(response));
}

}  // namespace

OpenAiRoutes::OpenAiRoutes(const HttpServerOptions& options, Engine* engine,
                           RequestValidator* validator, const Tokenizer* tokenizer,
                           ChatRenderer chat)
    : options_(options),
      engine_(engine),
      validator_(validator),
      tokenizer_(tokenizer),
      chat_(std::move(chat)),
      tool_parser_(
          ParseToolCallParserName(options.tool_call_parser).value_or(ToolCallParser::kNone)),
      started_(absl::ToUnixSeconds(absl::Now())),
      pool_(std::make_unique<ValidationPool>(std::max(1, options.tokenizer_threads),
                                             std::max(1, options.max_pending_tokenizations))) {}

OpenAiRoutes::~OpenAiRoutes() = default;

bool OpenAiRoutes::Authorized(absl::string_view api_key, absl::string_view path,
                              absl::string_view authorization) {
  if (api_key.empty() || !absl::StartsWith(path, "/v1/")) return true;
  return ConstantTimeEquals(absl::StrCat("Bearer ", api_key), authorization);
}

absl::string_view OpenAiRoutes::RouteLabel(absl::string_view path) {
  for (absl::string_view route : {"/v1/completions", "/v1/chat/completions", "/v1/models",
                                  "/health", "/ping", "/version", "/tokenize", "/detokenize"}) {
    if (path == route) return route;
  }
  if (absl::StartsWith(path, kModelsPrefix)) return "/v1/models/{id}";
  return "other";
}

bool OpenAiRoutes::AnsweredAtOnce(absl::string_view route) {
  return route == "/health" || route == "/ping" || route == "/version" || route == "/v1/models" ||
         route == "/v1/models/{id}";
}

bool OpenAiRoutes::Routable(absl::string_view method, absl::string_view path, int* status) {
  const absl::string_view route = RouteLabel(path);
  if (route == "other") {
    *status = 404;
    return false;
  }
  const bool post = route == "/v1/completions" || route == "/v1/chat/completions" ||
                    route == "/tokenize" || route == "/detokenize";
  const bool allowed =
      post ? method == "POST" : (method == "GET" || (route == "/ping" && method == "POST"));
  if (!allowed) *status = 405;
  return allowed;
}

absl::Status OpenAiRoutes::CheckModel(const std::string& model) const {
  if (model.empty() || model == options_.model_name) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat(
      "model: `", model, "` does not exist; this server serves `", options_.model_name, "`"));
}

void OpenAiRoutes::Handle(HttpRequest request, std::shared_ptr<HttpExchange> exchange) {
  const absl::string_view route = RouteLabel(request.path);
  if (route == "/health" || route == "/ping") {
    const bool serving = !draining_.load() && engine_->healthy();
    return exchange->Respond(serving ? 200 : 503, kJson, "");
  }
  if (route == "/version") {
    return exchange->Respond(200, kJson, Dump({{"version", PAGODA_VERSION}}));
  }
  const json model = {{"id", options_.model_name},   {"object", "model"},
                      {"created", started_},         {"owned_by", "pagoda"},
                      {"root", options_.model_name}, {"max_model_len", options_.max_model_len}};
  if (route == "/v1/models") {
    return exchange->Respond(200, kJson,
                             Dump({{"object", "list"}, {"data", json::array({model})}}));
  }
  if (route == "/v1/models/{id}") {
    const std::string id = request.path.substr(kModelsPrefix.size());
    if (id != options_.model_name) {
      return RespondError(*exchange, absl::NotFoundError(absl::StrCat(
                                         "model: `", id, "` does not exist; this server serves `",
                                         options_.model_name, "`")));
    }
    return exchange->Respond(200, kJson, Dump(model));
  }
  if (route == "/tokenize" || route == "/detokenize") {
    auto body = std::make_shared<std::string>(std::move(request.body));
    auto work = route == "/tokenize" ? &OpenAiRoutes::Tokenize : &OpenAiRoutes::Detokenize;
    return OffLoop(exchange,
                   [this, work, exchange, body, budget = std::move(request.budget)]() mutable {
                     (this->*work)(*body, exchange);
                     *body = std::string();
                     budget.reset();
                   });
  }
  const bool chat = route == "/v1/chat/completions";
  // A small completions body with token-id prompts needs no tokenizer:
  // parsed and validated right here, without two thread hops (as gRPC
  // validates token-id prompts inline).
  if (!chat && request.body.size() <= kInlineBodyBytes) {
    const absl::StatusOr<json> parsed = ParseJsonBody(request.body);
    if (!parsed.ok()) return RespondError(*exchange, parsed.status());
    if (!NeedsTokenizer(*parsed)) {
      absl::StatusOr<Prepared> prepared = Prepare(*parsed, chat, request.body);
      if (!prepared.ok()) return RespondError(*exchange, prepared.status());
      return Launch(*std::move(prepared), std::move(exchange));
    }
  }
  auto body = std::make_shared<std::string>(std::move(request.body));
  OffLoop(exchange, [this, exchange, body, chat, budget = std::move(request.budget)]() mutable {
    absl::StatusOr<Prepared> prepared = ParseAndPrepare(*body, chat);
    *body = std::string();
    budget.reset();
    boost::asio::post(exchange->executor(),
                      [this, exchange, prepared = std::move(prepared)]() mutable {
                        if (!prepared.ok()) return RespondError(*exchange, prepared.status());
                        Launch(*std::move(prepared), exchange);
                      });
  });
}

void OpenAiRoutes::OffLoop(std::shared_ptr<HttpExchange> exchange, std::function<void()> work) {
  if (pool_ == nullptr || !pool_->TrySubmit(std::move(work))) {
    RespondError(*exchange, absl::ResourceExhaustedError(
                                "too many requests waiting to be tokenized; retry later"));
  }
}

absl::StatusOr<OpenAiRoutes::Prepared> OpenAiRoutes::ParseAndPrepare(const std::string& raw,
                                                                     bool chat) {
  const absl::StatusOr<json> parsed = ParseJsonBody(raw);
  if (!parsed.ok()) return parsed.status();
  return Prepare(*parsed, chat, raw);
}

absl::StatusOr<OpenAiRoutes::Prepared> OpenAiRoutes::Prepare(const json& body, bool chat,
                                                             const std::string& raw) {
  // Schemas, tools and template variables keep the client's key order: read
  // them from an order-keeping parse (only bodies that carry one pay for it;
  // `raw` parsed once already, so this one succeeds).
  nlohmann::ordered_json ordered;
  if (NeedsOrderedBody(body)) ordered = ParseOrderedJsonBody(raw).value_or(nullptr);
  absl::StatusOr<OpenAiRequest> parsed =
      ParseOpenAiRequest(body, chat, options_.max_model_len, validator_->limits().defaults,
                         ordered.is_object() ? &ordered : nullptr, tool_parser_);
  if (!parsed.ok()) return parsed.status();
  if (absl::Status status = CheckModel(parsed->model); !status.ok()) return status;
  if (chat) {
    if (!chat_) {
      return absl::InvalidArgumentError(
          "messages: this model has no chat template; start the server with --chat-template FILE");
    }
    if (tokenizer_ == nullptr)
      return absl::InvalidArgumentError("messages: the model has no tokenizer");
    absl::StatusOr<std::string> prompt =
        chat_(parsed->messages, parsed->add_generation_prompt, parsed->tools.tools,
              parsed->chat_template_kwargs);
    if (!prompt.ok()) return prompt.status();
    // The template writes BOS and other special tokens itself, so the prompt
    // goes in as ids (the validator adds BOS only to text prompts).
    absl::StatusOr<std::vector<int>> ids = tokenizer_->Encode(*prompt);
    if (!ids.ok()) return ids.status();
    for (int id : *ids) parsed->generate.add_prompt_token_ids(id);
  }
  Prepared prepared;
  const size_t num_prompts = std::max<size_t>(1, parsed->prompts.size());
  for (size_t i = 0; i < num_prompts; ++i) {
    const pagoda::v1::GenerateRequest one = PromptRequest(*parsed, i);
    absl::StatusOr<ValidatedRequest> validated = validator_->Validate(one);
    if (!validated.ok()) {
      if (num_prompts == 1) return validated.status();
      return absl::Status(validated.status().code(),
                          absl::StrCat("prompt[", i, "]: ", validated.status().message()));
    }
    if (parsed->echo) {
      if (one.prompt_token_ids_size() == 0) {
        prepared.echo.push_back(one.prompt());
      } else if (tokenizer_ == nullptr) {
        return absl::InvalidArgumentError("echo: needs a tokenizer for token-id prompts");
      } else {
        absl::StatusOr<std::string> text = tokenizer_->Decode(
            std::vector<int>(one.prompt_token_ids().begin(), one.prompt_token_ids().end()));
        if (!text.ok()) return text.status();
        prepared.echo.push_back(*std::move(text));
      }
    }
    prepared.validated.push_back(*std::move(validated));
  }
  prepared.request = *std::move(parsed);
  return prepared;
}

void OpenAiRoutes::Launch(Prepared prepared, std::shared_ptr<HttpExchange> exchange) {
  auto call = std::make_shared<CompletionCall>(engine_, tokenizer_, options_.model_name,
                                               std::move(prepared), exchange, &calls_);
  exchange->Attach(call);
  call->Start();
}

void OpenAiRoutes::Tokenize(const std::string& body_text, std::shared_ptr<HttpExchange> exchange) {
  auto answer = [&]() -> absl::StatusOr<json> {
    const absl::StatusOr<json> parsed_body = ParseJsonBody(body_text);
    if (!parsed_body.ok()) return parsed_body.status();
    nlohmann::ordered_json ordered;
    if (NeedsOrderedBody(*parsed_body)) ordered = ParseOrderedJsonBody(body_text).value_or(nullptr);
    absl::StatusOr<TokenizeRequest> request =
        ParseTokenizeRequest(*parsed_body, ordered.is_object() ? &ordered : nullptr);
    if (!request.ok()) return request.status();
    if (absl::Status status = CheckModel(request->model); !status.ok()) return status;
    if (tokenizer_ == nullptr) return absl::InvalidArgumentError("the model has no tokenizer");
    if (static_cast<int64_t>(request->prompt.size()) > MaxPromptBytes(validator_->limits())) {
      return absl::InvalidArgumentError("prompt: longer than the model could ever take");
    }
    std::string text = request->prompt;
    if (request->chat) {
      if (!chat_) {
        return absl::InvalidArgumentError("messages: this model has no chat template");
      }
      absl::StatusOr<std::string> rendered =
          chat_(request->messages, request->add_generation_prompt, request->tools,
                request->chat_template_kwargs);
      if (!rendered.ok()) return rendered.status();
      text = *std::move(rendered);
    }
    absl::StatusOr<std::vector<int>> ids = tokenizer_->Encode(text);
    if (!ids.ok()) return ids.status();
    // BOS exactly as the validator adds it to a text prompt, so that the
    // count is what a completion's usage will say.
    if (request->add_special_tokens && validator_->limits().bos_token_id >= 0) {
      ids->insert(ids->begin(), validator_->limits().bos_token_id);
    }
    json out = {{"count", ids->size()},
                {"max_model_len", options_.max_model_len},
                {"tokens", *ids},
                {"token_strs", nullptr}};
    if (request->return_token_strs) {
      json strs = json::array();
      for (int id : *ids) {
        absl::StatusOr<std::string> piece = tokenizer_->Decode({id});
        strs.push_back(piece.ok() ? *piece : "");
      }
      out["token_strs"] = std::move(strs);
    }
    return out;
  }();
  boost::asio::post(exchange->executor(), [exchange, answer = std::move(answer)] {
    if (!answer.ok()) return RespondError(*exchange, answer.status());
    exchange->Respond(200, kJson, Dump(*answer));
  });
}

void OpenAiRoutes::Detokenize(const std::string& body_text,
                              std::shared_ptr<HttpExchange> exchange) {
  auto answer = [&]() -> absl::StatusOr<json> {
    const absl::StatusOr<json> parsed_body = ParseJsonBody(body_text);
    if (!parsed_body.ok()) return parsed_body.status();
    if (tokenizer_ == nullptr) return absl::InvalidArgumentError("the model has no tokenizer");
    std::string model;
    absl::StatusOr<std::vector<int>> ids =
        ParseDetokenizeRequest(*parsed_body, tokenizer_->vocab_size(), &model);
    if (!ids.ok()) return ids.status();
    if (absl::Status status = CheckModel(model); !status.ok()) return status;
    absl::StatusOr<std::string> text = tokenizer_->Decode(*ids);
    if (!text.ok()) return text.status();
    return json{{"prompt", *text}};
  }();
  boost::asio::post(exchange->executor(), [exchange, answer = std::move(answer)] {
    if (!answer.ok()) return RespondError(*exchange, answer.status());
    exchange->Respond(200, kJson, Dump(*answer));
  });
}

}  // namespace pagoda::scheduler
