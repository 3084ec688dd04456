#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "scheduler/api/openai_protocol.h"
#include "scheduler/engine/finish_reason.h"

namespace pagoda::scheduler {
namespace {

using nlohmann::json;

json FinishReasonJson(pagoda::v1::FinishReason reason) {
  const std::string_view name = FinishReasonName(reason);
  return name.empty() ? json() : json(std::string(name));
}

std::string TokenText(const Tokenizer* tokenizer, int32_t id) {
  if (tokenizer == nullptr) return absl::StrCat("token_id:", id);
  absl::StatusOr<std::string> text = tokenizer->Decode({id});
  return text.ok() ? *text : absl::StrCat("token_id:", id);
}

// A logprobs entry's token: its text, or vLLM's "token_id:N" when the
// request asks (return_tokens_as_token_ids).
std::string LogprobToken(const OpenAiRequest& request, const Tokenizer* tokenizer, int32_t id) {
  if (request.return_tokens_as_token_ids.value_or(false)) return absl::StrCat("token_id:", id);
  return TokenText(tokenizer, id);
}

json Bytes(const std::string& text) {
  json out = json::array();
  for (unsigned char byte : text) out.push_back(static_cast<int>(byte));
  return out;
}

// OpenAI's logprobs of a choice: the legacy completions shape or chat's.
json LogprobsJson(const OpenAiRequest& request, const pagoda::v1::SequenceOutput& output,
                  const Tokenizer* tokenizer) {
  if (request.top_logprobs < 0) return json();
  if (request.chat) {
    json content = json::array();
    for (const pagoda::v1::TokenLogprobs& token : output.logprobs()) {
      const std::string text = LogprobToken(request, tokenizer, token.token_id());
      json top = json::array();
      for (int i = 0; i < token.top_size() && i < request.top_logprobs; ++i) {
        const std::string alternative = LogprobToken(request, tokenizer, token.top(i).token_id());
        top.push_back({{"token", alternative},
                       {"logprob", token.top(i).logprob()},
                       {"bytes", Bytes(alternative)}});
      }
      content.push_back({{"token", text},
                         {"logprob", token.logprob()},
                         {"bytes", Bytes(text)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       offsets = json::array();
  size_t offset = 0;
  for (const pagoda::v1::TokenLogprobs& token : output.logprobs()) {
    const std::string text = LogprobToken(request, tokenizer, token.token_id());
    tokens.push_back(text);
    token_logprobs.push_back(token.logprob());
    json top = json::object();
    for (int i = 0; i < token.top_size() && i < request.top_logprobs; ++i) {
      top[LogprobToken(request, tokenizer, token.top(i).token_id())] = token.top(i).logprob();
    }
    top_logprobs.push_back(top);
    offsets.push_back(offset);
    offset += text.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top_logprobs},
          {"text_offset", offsets}};
}

// vLLM's prompt_logprobs: null for the first prompt token, then per
// position {token id: {logprob, rank, decoded_token}} for the prompt's
// token and the top ones (ranks of the top ones; the prompt's token has a
// rank where it is among them).
json VllmPromptLogprobsJson(const pagoda::v1::GenerateResponse& response,
                            const Tokenizer* tokenizer) {
  json out = json::array({nullptr});
  for (const pagoda::v1::TokenLogprobs& entry : response.prompt_logprobs()) {
    json position = json::object();
    for (int i = 0; i < entry.top_size(); ++i) {
      position[std::to_string(entry.top(i).token_id())] = {
          {"logprob", entry.top(i).logprob()},
          {"rank", i + 1},
          {"decoded_token", TokenText(tokenizer, entry.top(i).token_id())}};
    }
    const std::string key = std::to_string(entry.token_id());
    if (!position.contains(key)) {
      position[key] = {{"logprob", entry.logprob()},
                       {"decoded_token", TokenText(tokenizer, entry.token_id())}};
    }
    out.push_back(std::move(position));
  }
  return out;
}

// Tool call ids: "call_" + this + "_<i>", from the request and choice.
std::string ToolCallIdPrefix(const std::string& request_id, int index) {
  return absl::StrFormat("%016x", std::hash<std::string>()(absl::StrCat(request_id, "/", index)));
}

// Whether a chat answer leaves its reasoning out (include_reasoning false
// under a reasoning parser): then its logprobs and token ids stay out too,
// as in vLLM, since they would spell it.
bool HidesReasoning(const OpenAiRequest& request) {
  return request.reasoning.has_value() && !request.include_reasoning;
}

// Under a reasoning parser: the delta's "reasoning" (when the client wants
// it) into `delta`; returns the content's part of the text.
std::string SplitDeltaReasoning(const OpenAiRequest& request,
                                const pagoda::v1::SequenceOutput& output, ChoiceStream* stream,
                                json* delta) {
  if (stream->reasoning == nullptr) {
    stream->reasoning = std::make_unique<ReasoningStream>(&*request.reasoning);
  }
  ReasoningStream::Pieces pieces = stream->reasoning->Feed(output.text());
  if (output.finish_reason() != pagoda::v1::FINISH_REASON_UNSPECIFIED) {
    ReasoningStream::Pieces rest = stream->reasoning->Finish();
    pieces.reasoning += rest.reasoning;
    pieces.content += rest.content;
  }
  if (request.include_reasoning && !pieces.reasoning.empty()) {
    (*delta)["reasoning"] = std::move(pieces.reasoning);
  }
  return std::move(pieces.content);
}

// A chat choice's delta: its text (under a reasoning parser, its reasoning
// and content), or with tools what ToolCallStream lets out of the content
// (tool calls when they are read); the finish reason becomes "tool_calls"
// when calls were made (not for a named function, as OpenAI).
json ChatDelta(const OpenAiRequest& request, const std::string& request_id,
               const pagoda::v1::SequenceOutput& output, ChoiceStream* stream, json* choice) {
  const bool splits = request.reasoning.has_value() && !request.reasoning_ended_in_prompt;
  if (!splits && request.tools.choice == ToolChoice::kNone) return {{"content", output.text()}};
  json delta = json::object();
  std::string content = output.text();
  if (splits) {
    content = SplitDeltaReasoning(request, output, stream, &delta);
    if (request.tools.choice == ToolChoice::kNone) {
      if (!content.empty()) delta["content"] = std::move(content);
      return delta;
    }
  }
  if (stream->tools == nullptr) {
    stream->tools = std::make_unique<ToolCallStream>(&request.tools, request.tool_parser,
                                                     ToolCallIdPrefix(request_id, output.index()));
  }
  if (json fed = stream->tools->Feed(content); fed.is_object()) delta.update(fed);
  if (output.finish_reason() == pagoda::v1::FINISH_REASON_UNSPECIFIED) return delta;
  bool made_calls = false;
  const json tail = stream->tools->Finish(&made_calls);
  if (tail.contains("content")) {
    delta["content"] = delta.value("content", "") + tail["content"].get<std::string>();
  }
  if (tail.contains("tool_calls")) delta["tool_calls"] = tail["tool_calls"];
  if (made_calls && output.finish_reason() == pagoda::v1::FINISH_REASON_STOP &&
      request.tools.choice != ToolChoice::kNamed) {
    (*choice)["finish_reason"] = "tool_calls";
  }
  return delta;
}

// A finished chat choice's message: its text (under a reasoning parser,
// split into "reasoning" and content), and with tools the calls read back
// from the content; the finish reason becomes "tool_calls" as in ChatDelta.
json ChatMessageJson(const OpenAiRequest& request, const std::string& request_id,
                     const pagoda::v1::SequenceOutput& output, json* choice) {
  std::optional<std::string> content = output.text();
  json message = {{"role", request.response_role}};
  if (request.reasoning.has_value() && request.reasoning_ended_in_prompt) {
    message["reasoning"] = nullptr;
  } else if (request.reasoning.has_value()) {
    ReasoningSplit split = SplitReasoning(*request.reasoning, output.text());
    message["reasoning"] =
        request.include_reasoning && split.reasoning.has_value() ? json(*split.reasoning) : json();
    content = std::move(split.content);
  }
  if (request.tools.choice == ToolChoice::kNone || !content.has_value()) {
    message["content"] = content.has_value() ? json(*content) : json();
    return message;
  }
  const ToolCallsReply reply = ExtractToolCalls(request.tools, request.tool_parser, *content);
  message["content"] = reply.content_null ? json() : json(reply.content);
  if (!reply.calls.empty()) {
    message["tool_calls"] = ToolCallsJson(reply.calls, ToolCallIdPrefix(request_id, output.index()),
                                          /*indexed=*/false);
    if (output.finish_reason() == pagoda::v1::FINISH_REASON_STOP &&
        request.tools.choice != ToolChoice::kNamed) {
      (*choice)["finish_reason"] = "tool_calls";
    }
  }
  return message;
}

std::vector<int32_t> TokenIds(const pagoda::v1::SequenceOutput& output) {
  return {output.token_ids().begin(), output.token_ids().end()};
}

std::string ResponseId(const OpenAiRequest& request, const std::string& request_id) {
  return absl::StrCat(request.chat ? "chatcmpl-" : "cmpl-", request_id);
}

}  // namespace

json MakeOpenAiResponse(const OpenAiRequest& request, const pagoda::v1::GenerateResponse& response,
                        const std::string& model, int64_t created, const Tokenizer* tokenizer) {
  json choices = json::array();
  int completion_tokens = 0;
  for (const pagoda::v1::SequenceOutput& output : response.outputs()) {
    completion_tokens += output.token_ids_size();
    json choice = {{"index", output.index()},
                   {"finish_reason", FinishReasonJson(output.finish_reason())},
                   {"logprobs", LogprobsJson(request, output, tokenizer)}};
    if (request.return_token_ids) choice["token_ids"] = TokenIds(output);
    if (HidesReasoning(request)) choice["logprobs"] = nullptr;
    if (request.chat) {
      json message = ChatMessageJson(request, response.request_id(), output, &choice);
      choice["message"] = std::move(message);
    } else {
      choice["text"] = output.text();
      if (request.vllm_prompt_logprobs) {
        choice["prompt_logprobs"] = VllmPromptLogprobsJson(response, tokenizer);
      }
    }
    choices.push_back(std::move(choice));
  }
  json whole = {{"id", ResponseId(request, response.request_id())},
                {"object", request.chat ? "chat.completion" : "text_completion"},
                {"created", created},
                {"model", model},
                {"choices", choices},
                {"usage", OpenAiUsage(response.prompt_token_count(), completion_tokens)}};
  if (request.chat && request.vllm_prompt_logprobs) {
    whole["prompt_logprobs"] = VllmPromptLogprobsJson(response, tokenizer);
  }
  return whole;
}

void PrependPromptLogprobs(const OpenAiRequest& request,
                           const std::vector<int32_t>& prompt_token_ids,
                           const pagoda::v1::GenerateResponse& response, const Tokenizer* tokenizer,
                           json* logprobs) {
  if (prompt_token_ids.empty() || !logprobs->is_object()) return;
  json tokens = json::array({LogprobToken(request, tokenizer, prompt_token_ids[0])});
  json token_logprobs = json::array({nullptr}), top_logprobs = json::array({nullptr});
  json offsets = json::array({0});
  size_t offset = tokens[0].get<std::string>().size();
  for (const pagoda::v1::TokenLogprobs& entry : response.prompt_logprobs()) {
    const std::string text = LogprobToken(request, tokenizer, entry.token_id());
    tokens.push_back(text);
    token_logprobs.push_back(entry.logprob());
    json top = json::object();
    for (int i = 0; i < entry.top_size() && i < request.top_logprobs; ++i) {
      top[LogprobToken(request, tokenizer, entry.top(i).token_id())] = entry.top(i).logprob();
    }
    top_logprobs.push_back(std::move(top));
    offsets.push_back(offset);
    offset += text.size();
  }
  for (size_t i = 0; i < (*logprobs)["tokens"].size(); ++i) {
    tokens.push_back((*logprobs)["tokens"][i]);
    token_logprobs.push_back((*logprobs)["token_logprobs"][i]);
    top_logprobs.push_back((*logprobs)["top_logprobs"][i]);
    offsets.push_back(offset + (*logprobs)["text_offset"][i].get<size_t>());
  }
  *logprobs = {{"tokens", tokens},
               {"token_logprobs", token_logprobs},
               {"top_logprobs", top_logprobs},
               {"text_offset", offsets}};
}

json MakeOpenAiChunk(const OpenAiRequest& request, const pagoda::v1::GenerateResponse& message,
                     const std::string& model, int64_t created, const Tokenizer* tokenizer,
                     std::vector<ChoiceStream>* streams) {
  json choices = json::array();
  for (const pagoda::v1::SequenceOutput& output : message.outputs()) {
    const bool finished = output.finish_reason() != pagoda::v1::FINISH_REASON_UNSPECIFIED;
    const bool hidden = HidesReasoning(request);
    // Tokens whose text is held back (a partial character, a stop string's
    // start) still go out when the client asked for the ids.
    const bool new_ids = request.return_token_ids && !hidden && output.token_ids_size() > 0;
    const bool logprobs = request.top_logprobs >= 0 && !hidden;
    if (output.text().empty() && !finished && !logprobs && !new_ids) continue;
    json choice = {{"index", output.index()},
                   {"finish_reason", FinishReasonJson(output.finish_reason())},
                   {"logprobs", hidden ? json() : LogprobsJson(request, output, tokenizer)}};
    if (request.return_token_ids && !hidden) choice["token_ids"] = TokenIds(output);
    if (request.chat) {
      if (streams->size() <= static_cast<size_t>(output.index())) {
        streams->resize(output.index() + 1);
      }
      ChoiceStream& stream = (*streams)[output.index()];
      json delta = ChatDelta(request, message.request_id(), output, &stream, &choice);
      if (delta.empty() && !finished && !logprobs && !new_ids) continue;
      if (!stream.role_sent) {
        delta["role"] = request.response_role;
        stream.role_sent = true;
      }
      choice["delta"] = std::move(delta);
    } else {
      choice["text"] = output.text();
    }
    choices.push_back(std::move(choice));
  }
  if (choices.empty()) return json();
  return {{"id", ResponseId(request, message.request_id())},
          {"object", request.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", choices}};
}

json MakeOpenAiUsageChunk(const OpenAiRequest& request, const std::string& request_id, json usage,
                          const std::string& model, int64_t created) {
  return {{"id", ResponseId(request, request_id)},
          {"object", request.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array()},
          {"usage", std::move(usage)}};
}

void AddPromptTokenIds(const OpenAiRequest& request, const std::vector<int32_t>& prompt_token_ids,
                       const std::vector<bool>& first_of_choice, json* response) {
  if (!request.return_token_ids) return;
  if (request.chat) {
    if (!first_of_choice.empty() && first_of_choice[0]) {
      (*response)["prompt_token_ids"] = prompt_token_ids;
    }
    return;
  }
  json& choices = (*response)["choices"];
  for (size_t i = 0; i < choices.size() && i < first_of_choice.size(); ++i) {
    choices[i]["prompt_token_ids"] = first_of_choice[i] ? json(prompt_token_ids) : json();
  }
}

json OpenAiUsage(int prompt_tokens, int completion_tokens, std::optional<int> cached_tokens,
                 std::optional<int> reasoning_tokens) {
  json usage = {{"prompt_tokens", prompt_tokens},
                {"completion_tokens", completion_tokens},
                {"total_tokens", prompt_tokens + completion_tokens}};
  if (cached_tokens.has_value()) {
    usage["prompt_tokens_details"] = {{"cached_tokens", *cached_tokens}};
  }
  if (reasoning_tokens.has_value()) {
    usage["completion_tokens_details"] = {{"reasoning_tokens", *reasoning_tokens}};
  }
  return usage;
}

}  // namespace pagoda::scheduler
