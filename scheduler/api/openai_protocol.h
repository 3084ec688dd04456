#ifndef PAGODA_SCHEDULER_API_OPENAI_PROTOCOL_H_
#define PAGODA_SCHEDULER_API_OPENAI_PROTOCOL_H_

// OpenAI's completions and chat completions JSON, mapped to and from
// pagoda.v1 messages so that HTTP requests take exactly the gRPC path
// (RequestValidator, engine, RequestOutput). Pure functions; thread-safe.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "pagoda/v1/generation.pb.h"
#include "scheduler/api/reasoning.h"
#include "scheduler/api/request_validation.h"
#include "scheduler/api/tool_calls.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace pagoda::scheduler {

using text::ChatMessage;

// One parsed POST /v1/completions or /v1/chat/completions body.
struct OpenAiRequest {
  bool chat = false;
  std::string model;  // "" when the body names none (the served model).
  // The first prompt (unset for chat: rendered later) and every option.
  pagoda::v1::GenerateRequest generate;
  // Completions: every prompt of the body, each a GenerateRequest with only
  // prompt or prompt_token_ids set (a list of prompts answers one choice
  // per prompt and sample, as vLLM). Empty for chat.
  std::vector<pagoda::v1::GenerateRequest> prompts;
  std::vector<ChatMessage> messages;  // Chat only.
  bool add_generation_prompt = true;  // Chat only.
  // Chat: transformers' continue_final_message, the prompt ends inside the
  // last message for the model to continue (not with add_generation_prompt).
  bool continue_final_message = false;
  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage.
  bool continuous_usage_stats = false;  // stream_options: usage in every chunk.
  // vLLM's --enable-prompt-tokens-details (set by the server, not the
  // body): usage.prompt_tokens_details.cached_tokens in the final usage.
  bool prompt_tokens_details = false;
  int top_logprobs = -1;                // -1 = no logprobs; else alternatives per token.
  // Choices answered per prompt by copying one sequence: n > 1 with
  // temperature 0 (greedy samples are all equal; vLLM returns n copies). The
  // engine then runs n = 1. 1 otherwise.
  int copies = 1;
  bool echo = false;  // Completions: the prompt's text before each choice's.
  // vLLM's prompt_logprobs body field was set: the response carries them in
  // vLLM's shape (completions: per choice; chat: beside the choices).
  bool vllm_prompt_logprobs = false;
  // vLLM's return_token_ids: each choice carries its "token_ids" (in a
  // stream, each chunk's new ones) and the prompt's "prompt_token_ids"
  // (completions: in each choice, chat: beside the choices; in a stream,
  // the first chunk of each choice, or of the response for chat).
  bool return_token_ids = false;
  // vLLM's return_tokens_as_token_ids: logprobs name each token
  // "token_id:N" instead of its text (unset: the server's
  // --return-tokens-as-token-ids).
  std::optional<bool> return_tokens_as_token_ids;
  // Chat: tools, tool_choice and how the server reads calls back.
  ToolsRequest tools;
  // Chat: vLLM's chat_template_kwargs, more variables for the template
  // (Llama 3.1's tools_in_user_message, date_string); null when none.
  nlohmann::ordered_json chat_template_kwargs;
  ToolCallParser tool_parser = ToolCallParser::kNone;
  // Chat under --reasoning-parser (set by the server, not the body): the
  // markers that split each answer into reasoning and content.
  std::optional<ReasoningMarkers> reasoning;
  // Chat: the answer's role (the server's --response-role, or without the
  // generation prompt the last message's role, as vLLM).
  std::string response_role = "assistant";
  // The chat prompt closed the thinking already (its last marker is the end
  // one): the answer is all content.
  bool reasoning_ended_in_prompt = false;
  // vLLM's include_reasoning (chat, default true): false leaves the
  // reasoning (and the logprobs, which would spell it) out of the answer.
  bool include_reasoning = true;
};

// One streamed choice's state: whether its role went out, and (with tools)
// what its text holds back for tool calls.
struct ChoiceStream {
  bool role_sent = false;
  std::unique_ptr<ToolCallStream> tools;
  std::unique_ptr<ReasoningStream> reasoning;
};

// The request to submit for prompt `index` of `request` (generate's options
// with that prompt). REQUIRES: index < max(1, prompts.size()).
pagoda::v1::GenerateRequest PromptRequest(const OpenAiRequest& request, size_t index);

// Parses and bounds a request body. INVALID_ARGUMENT names the field.
// Fields this server does not implement (tools, suffix, vLLM's old
// guided_* names...) are INVALID_ARGUMENT when set to anything but their
// neutral value; fields without effect on the output (user,
// metadata, store, response_format {"type": "text"}) are accepted and
// ignored. Sampling takes the gRPC names (presence_penalty,
// frequency_penalty, repetition_penalty, min_p, logit_bias with token-id
// string keys, allowed_token_ids, bad_words). max_tokens, as vLLM's: a
// completion that names none takes 16; a chat request that gives none, or
// any request whose max_tokens is null, takes the model's default
// (`defaults.max_tokens`), else `default_chat_max_tokens` (OpenAI's "until
// the context is full"). Absent sampling fields stay unset so the model's
// `defaults` apply (RequestValidator fills them), except temperature, which
// is OpenAI's 1 when the model has no default.
// Structured outputs: OpenAI's response_format (text, json_object,
// json_schema) or vLLM's structured_outputs (json, regex, choice, grammar,
// json_object, disable_any_whitespace) become the request's constraint;
// `ordered_body`, the same body parsed keeping key order (may be null), is
// where schemas are read from, so properties keep the client's order.
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(
    const nlohmann::json& body, bool chat, int default_chat_max_tokens,
    const SamplingDefaults& defaults, const nlohmann::ordered_json* ordered_body = nullptr,
    ToolCallParser tool_parser = ToolCallParser::kNone);
// The same with no model defaults.
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(const nlohmann::json& body, bool chat,
                                                 int default_chat_max_tokens);

// The whole (non-streaming) response object.
nlohmann::json MakeOpenAiResponse(const OpenAiRequest& request,
                                  const pagoda::v1::GenerateResponse& response,
                                  const std::string& model, int64_t created,
                                  const Tokenizer* tokenizer);

// Completions with echo and logprobs (OpenAI's legacy shape): puts the
// prompt's tokens before the choice's in `logprobs` (tokens, token_logprobs
// with null for the first prompt token, top_logprobs, text_offset shifted
// past the prompt). `prompt_token_ids` is the part's prompt; `response`
// holds its prompt logprobs.
void PrependPromptLogprobs(const OpenAiRequest& request,
                           const std::vector<int32_t>& prompt_token_ids,
                           const pagoda::v1::GenerateResponse& response,
                           const Tokenizer* tokenizer, nlohmann::json* logprobs);

// The chunk of one stream message (choices with their deltas), or null JSON
// when the message holds nothing to send. `streams` (one per choice index,
// grown as needed) is updated so that chat streams send the assistant role
// once per choice and tool calls as OpenAI streams them.
nlohmann::json MakeOpenAiChunk(const OpenAiRequest& request,
                               const pagoda::v1::GenerateResponse& message,
                               const std::string& model, int64_t created,
                               const Tokenizer* tokenizer, std::vector<ChoiceStream>* streams);

// The last chunk of a stream with include_usage: no choices, the usage.
nlohmann::json MakeOpenAiUsageChunk(const OpenAiRequest& request, const std::string& request_id,
                                    nlohmann::json usage, const std::string& model,
                                    int64_t created);

// return_token_ids: puts `prompt_token_ids` where vLLM does on a whole
// response (each completions choice; chat: the response) or on a stream
// chunk (`first_of_choice[i]`: choice i of the chunk is that choice's
// first; chat: `first_of_choice` holds one entry, the response's first).
void AddPromptTokenIds(const OpenAiRequest& request, const std::vector<int32_t>& prompt_token_ids,
                       const std::vector<bool>& first_of_choice, nlohmann::json* response);

// The usage object: prompt, completion and total tokens, with
// `cached_tokens` vLLM's prompt_tokens_details {"cached_tokens": N}, and
// with `reasoning_tokens` (chat under --reasoning-parser)
// completion_tokens_details {"reasoning_tokens": N}.
nlohmann::json OpenAiUsage(int prompt_tokens, int completion_tokens,
                           std::optional<int> cached_tokens = std::nullopt,
                           std::optional<int> reasoning_tokens = std::nullopt);

// vLLM's POST /tokenize body: a prompt or chat messages.
struct TokenizeRequest {
  std::string model;
  std::string prompt;                 // When !chat.
  std::vector<ChatMessage> messages;  // When chat.
  bool chat = false;
  bool add_special_tokens = true;     // BOS for a prompt (vLLM: true for prompts).
  bool add_generation_prompt = true;  // Chat only.
  bool continue_final_message = false;  // Chat only: as OpenAiRequest's.
  bool return_token_strs = false;
  nlohmann::ordered_json tools;                 // Chat only: rendered, never called.
  nlohmann::ordered_json chat_template_kwargs;  // Chat only.
};
// `ordered`: the same body parsed keeping key order (what the template
// prints of tools and messages), or null.
absl::StatusOr<TokenizeRequest> ParseTokenizeRequest(const nlohmann::json& body,
                                                     const nlohmann::ordered_json* ordered);

// Whether a body carries fields a template prints in the client's key order
// (tools, schemas, template variables): such a body is also parsed into an
// ordered_json.
bool NeedsOrderedBody(const nlohmann::json& body);

// vLLM's POST /detokenize body: token ids, each in [0, vocab_size).
absl::StatusOr<std::vector<int>> ParseDetokenizeRequest(const nlohmann::json& body, int vocab_size,
                                                        std::string* model);

// OpenAI's error body {"error": {"message", "type", "param", "code"}} and the
// HTTP status for `status` (400 bad request, 404 unknown model, 409 duplicate
// id, 429 queue full, 503 draining or workers down, 500 otherwise).
int HttpStatusOf(const absl::Status& status);
nlohmann::json MakeOpenAiError(const absl::Status& status);
// The same shape for an HTTP-level error (413, 431, 405...): `code` is
// always the HTTP status.
nlohmann::json MakeOpenAiError(int http_status, const std::string& message);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_OPENAI_PROTOCOL_H_
