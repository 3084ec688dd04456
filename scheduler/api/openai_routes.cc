#include "scheduler/api/openai_routes.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "boost/asio/post.hpp"
#include "nlohmann/json.hpp"
#include "scheduler/api/api_key.h"
#include "scheduler/api/http_json_reply.h"
#include "scheduler/api/json_body.h"
#include "scheduler/api/openai_protocol.h"

#ifndef PAGODA_VERSION
#define PAGODA_VERSION "unknown"
#endif

namespace pagoda::scheduler {

using nlohmann::json;

namespace {

constexpr absl::string_view kModelsPrefix = "/v1/models/";

// Bodies up to this size with token-id prompts are handled on the loop.
constexpr size_t kInlineBodyBytes = 16 << 10;

bool IsLoraRoute(absl::string_view route) {
  return route == "/v1/load_lora_adapter" || route == "/v1/unload_lora_adapter";
}

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

// The server's response flags (--enable-prompt-tokens-details,
// --enable-force-include-usage, --return-tokens-as-token-ids) over what the
// body asked.
void ApplyResponseFlags(const HttpServerOptions& options, OpenAiRequest& request) {
  request.prompt_tokens_details = options.enable_prompt_tokens_details;
  if (!request.return_tokens_as_token_ids.has_value()) {
    request.return_tokens_as_token_ids = options.return_tokens_as_token_ids;
  }
  if (options.enable_force_include_usage && request.stream) {
    request.include_usage = request.continuous_usage_stats = true;  // vLLM's (True, True).
  }
  if (request.chat) request.reasoning = options.reasoning;
  request.response_role = request.add_generation_prompt || request.messages.empty()
                              ? options.response_role
                              : request.messages.back().role;
}

// vLLM's structured outputs under a reasoning parser, for every request
// (its engine's rule, chat and completions alike): the grammar waits for
// the end marker unless the prompt closed the thinking already, or the
// request leaves the reasoning out (include_reasoning false: vLLM's
// resolve_reasoning_ended binds from the first token).
void WaitForThinking(const std::optional<ReasoningMarkers>& markers, bool include_reasoning,
                     ValidatedRequest& request) {
  if (!markers.has_value() || !include_reasoning || request.sampling.grammar == nullptr ||
      request.sampling.grammar_after_token >= 0 ||
      ReasoningEndedIn(*markers, request.prompt_token_ids)) {
    return;
  }
  request.sampling.grammar_after_token = markers->end_id;
}

}  // namespace

OpenAiRoutes::OpenAiRoutes(const HttpServerOptions& options, RequestPath* path, ChatRenderer chat)
    : options_(options),
      path_(path),
      tokenizer_(path != nullptr ? path->tokenizer() : nullptr),
      chat_(std::move(chat)),
      tool_parser_(
          ParseToolCallParserName(options.tool_call_parser).value_or(ToolCallParser::kNone)),
      started_(absl::ToUnixSeconds(absl::Now())) {}

OpenAiRoutes::~OpenAiRoutes() { StopPool(); }

bool OpenAiRoutes::Authorized(absl::string_view api_key, absl::string_view path,
                              absl::string_view authorization) {
  // As vLLM, whose key guards /v1 only.
  return !absl::StartsWith(path, "/v1/") || BearerKeyMatches(api_key, authorization);
}

absl::string_view OpenAiRoutes::RouteLabel(absl::string_view path) {
  for (absl::string_view route :
       {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/ping", "/version",
        "/load", "/tokenize", "/detokenize", "/v1/load_lora_adapter", "/v1/unload_lora_adapter"}) {
    if (path == route) return route;
  }
  if (absl::StartsWith(path, kModelsPrefix)) return "/v1/models/{id}";
  return "other";
}

bool OpenAiRoutes::AnsweredAtOnce(absl::string_view route) {
  return route == "/health" || route == "/ping" || route == "/version" || route == "/load" ||
         route == "/v1/models" || route == "/v1/models/{id}";
}

bool OpenAiRoutes::Routable(absl::string_view method, absl::string_view path, int* status) {
  const absl::string_view route = RouteLabel(path);
  if (route == "other") {
    *status = 404;
    return false;
  }
  const bool post = route == "/v1/completions" || route == "/v1/chat/completions" ||
                    route == "/tokenize" || route == "/detokenize" || IsLoraRoute(route);
  const bool allowed =
      post ? method == "POST" : (method == "GET" || (route == "/ping" && method == "POST"));
  if (!allowed) *status = 405;
  return allowed;
}

bool OpenAiRoutes::IsModelName(absl::string_view name) const {
  return name == options_.model_name ||
         std::find(options_.model_aliases.begin(), options_.model_aliases.end(), name) !=
             options_.model_aliases.end();
}

absl::StatusOr<std::string> OpenAiRoutes::AdapterFor(const std::string& model) const {
  if (path_->lora_adapters() != nullptr) return path_->lora_adapters()->AdapterFor(model);
  if (model.empty() || IsModelName(model)) return std::string();
  return absl::NotFoundError(absl::StrCat(
      "model: `", model, "` does not exist; this server serves `", options_.model_name, "`"));
}

absl::Status OpenAiRoutes::CheckModel(const std::string& model) const {
  return AdapterFor(model).status();
}

void OpenAiRoutes::Handle(HttpRequest request, std::shared_ptr<HttpExchange> exchange) {
  const absl::string_view route = RouteLabel(request.path);
  if (route == "/health" || route == "/ping") {
    const bool serving = !draining_.load() && path_->engine()->healthy();
    return exchange->Respond(serving ? 200 : 503, kJsonContentType, "");
  }
  if (route == "/version") {
    return exchange->Respond(200, kJsonContentType, DumpJson({{"version", PAGODA_VERSION}}));
  }
  if (route == "/load") {  // vLLM's: 0 without --enable-server-load-tracking.
    const int load = options_.enable_server_load_tracking ? calls_.active() : 0;
    return exchange->Respond(200, kJsonContentType, DumpJson({{"server_load", load}}));
  }
  if (route == "/v1/models" || route == "/v1/models/{id}") {
    return AnswerModels(route, request.path, *exchange);
  }
  if (IsLoraRoute(route)) return ChangeAdapters(route, std::move(request), std::move(exchange));
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

void OpenAiRoutes::AnswerModels(absl::string_view route, const std::string& path,
                                HttpExchange& exchange) const {
  // One card a name, as vLLM's (its root the first name).
  const auto card = [this](const std::string& name) {
    return json{{"id", name},
                {"object", "model"},
                {"created", started_},
                {"owned_by", "pagoda"},
                {"root", options_.model_name},
                {"parent", nullptr},
                {"max_model_len", options_.max_model_len}};
  };
  LoraAdapters* const adapters = path_->lora_adapters();
  if (route == "/v1/models") {
    json data = json::array({card(options_.model_name)});
    for (const std::string& alias : options_.model_aliases) data.push_back(card(alias));
    if (adapters != nullptr) {
      for (json& card : adapters->ModelCards(started_)) data.push_back(std::move(card));
    }
    return exchange.Respond(200, kJsonContentType,
                            DumpJson({{"object", "list"}, {"data", std::move(data)}}));
  }
  const std::string id = path.substr(kModelsPrefix.size());  // /v1/models/{id}
  if (IsModelName(id)) return exchange.Respond(200, kJsonContentType, DumpJson(card(id)));
  if (adapters != nullptr) {
    absl::StatusOr<json> card = adapters->ModelCard(id, started_);
    if (card.ok()) return exchange.Respond(200, kJsonContentType, DumpJson(*card));
  }
  RespondError(exchange, CheckModel(id));
}

void OpenAiRoutes::OffLoop(std::shared_ptr<HttpExchange> exchange, std::function<void()> work) {
  absl::Status started = path_->RunValidation(true, &pending_validations_, std::move(work));
  if (!started.ok()) RespondError(*exchange, started);
}

absl::StatusOr<OpenAiRoutes::Prepared> OpenAiRoutes::ParseAndPrepare(const std::string& raw,
                                                                     bool chat) {
  const absl::StatusOr<json> parsed = ParseJsonBody(raw);
  if (!parsed.ok()) return parsed.status();
  return Prepare(*parsed, chat, raw);
}

absl::Status OpenAiRoutes::RenderChatPrompt(OpenAiRequest& request) const {
  if (!chat_) {
    return absl::InvalidArgumentError(
        "messages: this model has no chat template; start the server with --chat-template FILE");
  }
  if (tokenizer_ == nullptr)
    return absl::InvalidArgumentError("messages: the model has no tokenizer");
  absl::StatusOr<std::string> prompt =
      chat_(request.messages, request.add_generation_prompt, request.continue_final_message,
            request.tools.tools, request.chat_template_kwargs);
  if (!prompt.ok()) return prompt.status();
  // The template writes BOS and other special tokens itself, so the prompt
  // goes in as ids (the validator adds BOS only to text prompts).
  absl::StatusOr<std::vector<int>> ids = tokenizer_->Encode(*prompt);
  if (!ids.ok()) return ids.status();
  for (int id : *ids) request.generate.add_prompt_token_ids(id);
  // A prompt that closed the thinking (Qwen3's enable_thinking false): the
  // answer is all content.
  request.reasoning_ended_in_prompt =
      request.reasoning.has_value() && ReasoningEndedIn(*request.reasoning, *ids);
  return absl::OkStatus();
}

absl::StatusOr<OpenAiRoutes::Prepared> OpenAiRoutes::Prepare(const json& body, bool chat,
                                                             const std::string& raw) {
  // Schemas, tools and template variables keep the client's key order: read
  // them from an order-keeping parse (only bodies that carry one pay for it;
  // `raw` parsed once already, so this one succeeds).
  nlohmann::ordered_json ordered;
  if (NeedsOrderedBody(body)) ordered = ParseOrderedJsonBody(raw).value_or(nullptr);
  absl::StatusOr<OpenAiRequest> parsed =
      ParseOpenAiRequest(body, chat, options_.max_model_len, path_->limits().defaults,
                         ordered.is_object() ? &ordered : nullptr, tool_parser_);
  if (!parsed.ok()) return parsed.status();
  ApplyResponseFlags(options_, *parsed);
  absl::StatusOr<std::string> adapter = AdapterFor(parsed->model);
  if (!adapter.ok()) return adapter.status();
  parsed->generate.set_lora_name(*adapter);
  if (chat) {
    if (absl::Status rendered = RenderChatPrompt(*parsed); !rendered.ok()) return rendered;
  }
  Prepared prepared;
  const size_t num_prompts = std::max<size_t>(1, parsed->prompts.size());
  for (size_t i = 0; i < num_prompts; ++i) {
    const pagoda::v1::GenerateRequest one = PromptRequest(*parsed, i);
    absl::StatusOr<ValidatedRequest> validated = path_->Validate(one);
    if (!validated.ok()) {
      if (num_prompts == 1) return validated.status();
      return absl::Status(validated.status().code(),
                          absl::StrCat("prompt[", i, "]: ", validated.status().message()));
    }
    WaitForThinking(options_.reasoning, parsed->include_reasoning, *validated);
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
  // Responses name the adapter that answered, as vLLM's do.
  const std::string& adapter = prepared.request.generate.lora_name();
  StartCompletionCall(path_, adapter.empty() ? options_.model_name : adapter, std::move(prepared),
                      std::move(exchange), &calls_);
}

void OpenAiRoutes::ChangeAdapters(absl::string_view route, HttpRequest request,
                                  std::shared_ptr<HttpExchange> exchange) {
  LoraAdapters* const adapters = path_->lora_adapters();
  if (adapters == nullptr) {
    return RespondError(*exchange, absl::NotFoundError(absl::StrCat(
                                       route,
                                       " needs LoRA serving: start pagoda-server with "
                                       "--enable-lora (and --lora-dir for runtime loads)")));
  }
  // A load reads and checks the adapter's files: off the loop.
  const bool load = route == "/v1/load_lora_adapter";
  auto body = std::make_shared<std::string>(std::move(request.body));
  OffLoop(exchange, [adapters, load, exchange, body, budget = std::move(request.budget)]() mutable {
    absl::StatusOr<std::string> answer = [&]() -> absl::StatusOr<std::string> {
      const absl::StatusOr<json> parsed = ParseJsonBody(*body);
      if (!parsed.ok()) return parsed.status();
      return load ? adapters->Load(*parsed) : adapters->Unload(*parsed);
    }();
    budget.reset();
    boost::asio::post(exchange->executor(), [exchange, answer = std::move(answer)] {
      if (answer.ok()) return exchange->Respond(200, "text/plain; charset=utf-8", *answer);
      const int status = LoraRouteHttpStatus(answer.status());
      exchange->Respond(status, kJsonContentType,
                        DumpJson(MakeOpenAiError(status, std::string(answer.status().message()))));
    });
  });
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
    if (static_cast<int64_t>(request->prompt.size()) > MaxPromptBytes(path_->limits())) {
      return absl::InvalidArgumentError("prompt: longer than the model could ever take");
    }
    std::string text = request->prompt;
    if (request->chat) {
      if (!chat_) {
        return absl::InvalidArgumentError("messages: this model has no chat template");
      }
      absl::StatusOr<std::string> rendered =
          chat_(request->messages, request->add_generation_prompt, request->continue_final_message,
                request->tools, request->chat_template_kwargs);
      if (!rendered.ok()) return rendered.status();
      text = *std::move(rendered);
    }
    absl::StatusOr<std::vector<int>> ids = tokenizer_->Encode(text);
    if (!ids.ok()) return ids.status();
    // BOS exactly as the validator adds it to a text prompt, so that the
    // count is what a completion's usage will say.
    if (request->add_special_tokens && path_->limits().bos_token_id >= 0) {
      ids->insert(ids->begin(), path_->limits().bos_token_id);
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
    exchange->Respond(200, kJsonContentType, DumpJson(*answer));
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
    exchange->Respond(200, kJsonContentType, DumpJson(*answer));
  });
}

}  // namespace pagoda::scheduler
