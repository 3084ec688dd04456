#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "scheduler/api/field_error.h"
#include "scheduler/api/openai_body_parts.h"
#include "scheduler/api/openai_protocol.h"
#include "scheduler/api/tool_calls.h"

namespace pagoda::scheduler {
namespace {

using nlohmann::json;
using openai_body::Boolean;
using openai_body::Integer;
using openai_body::kMaxPrompts;
using openai_body::kMaxPromptTokenIds;
using openai_body::ParseChatTemplateKwargs;
using openai_body::ParseConstraint;
using openai_body::ParseLogprobs;
using openai_body::ParseMessages;
using openai_body::ParsePriority;
using openai_body::ParseSampling;
using openai_body::ParseStopping;
using openai_body::ParseStreaming;
using openai_body::ParseToolChoice;
using openai_body::Present;

// One prompt: a string or an array of token ids.
absl::Status ParseOnePrompt(const json& prompt, pagoda::v1::GenerateRequest* out) {
  if (prompt.is_string()) {
    out->set_prompt(prompt.get<std::string>());
    return absl::OkStatus();
  }
  if (prompt.is_array() && !prompt.empty() && prompt.size() <= kMaxPromptTokenIds) {
    for (const json& id : prompt) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        return InvalidField("prompt", "must be a string or an array of token ids");
      }
      out->add_prompt_token_ids(id.get<int32_t>());
    }
    return absl::OkStatus();
  }
  return InvalidField(
      "prompt",
      "must be a string, an array of token ids, or a list of either (one choice per "
      "prompt)");
}

absl::Status ParsePrompts(const json& body, std::vector<pagoda::v1::GenerateRequest>* out) {
  if (!Present(body, "prompt")) return InvalidField("prompt", "required");
  const json& prompt = body["prompt"];
  // A list of prompts: strings, or arrays of token ids.
  if (prompt.is_array() && !prompt.empty() && (prompt[0].is_string() || prompt[0].is_array())) {
    if (prompt.size() > kMaxPrompts) {
      return InvalidField("prompt",
                          absl::StrCat("at most ", kMaxPrompts, " prompts in one request"));
    }
    for (const json& entry : prompt) {
      if (!entry.is_string() && !entry.is_array()) {
        return InvalidField("prompt", "a list of prompts must hold strings or arrays of token ids");
      }
      if (absl::Status status = ParseOnePrompt(entry, &out->emplace_back()); !status.ok()) {
        return status;
      }
    }
    return absl::OkStatus();
  }
  return ParseOnePrompt(prompt, &out->emplace_back());
}

// vLLM's rule: a chat prompt ends either with the generation prompt or
// inside its last message, not both.
absl::Status CheckPromptEnding(bool add_generation_prompt, bool continue_final_message) {
  if (!add_generation_prompt || !continue_final_message) return absl::OkStatus();
  return InvalidField("continue_final_message",
                      "cannot be true with add_generation_prompt true (set that false)");
}

// Refuses options that would change the output in ways this server ignores.
absl::Status RefuseUnsupported(const json& body) {
  for (const char* key : {"functions", "function_call"}) {
    if (Present(body, key) && !(body[key].is_object() && body[key].empty()) &&
        !(body[key].is_array() && body[key].empty())) {
      return InvalidField(key, "is not supported");
    }
  }
  // vLLM's older names: refused by name rather than silently unconstrained.
  for (const char* key : {"guided_json", "guided_regex", "guided_choice", "guided_grammar",
                          "guided_decoding_backend", "guided_whitespace_pattern"}) {
    if (Present(body, key)) {
      return InvalidField(key, "is not supported; use structured_outputs (vLLM's current name)");
    }
  }
  // vLLM refuses it too: fill-in-the-middle needs the model's own format.
  if (Present(body, "suffix") && !(body["suffix"].is_string() && body["suffix"].empty())) {
    return InvalidField("suffix", "is not supported (no fill-in-the-middle); leave it out");
  }
  return absl::OkStatus();
}

// vLLM's return_token_ids (the prompt's and each choice's token ids) and
// return_tokens_as_token_ids (logprobs name tokens "token_id:N").
absl::Status ParseTokenIdOptions(const json& body, OpenAiRequest* out) {
  absl::StatusOr<bool> return_token_ids = Boolean(body, "return_token_ids", false);
  if (!return_token_ids.ok()) return return_token_ids.status();
  out->return_token_ids = *return_token_ids;
  absl::StatusOr<bool> include_reasoning = Boolean(body, "include_reasoning", true);
  if (!include_reasoning.ok()) return include_reasoning.status();
  out->include_reasoning = *include_reasoning;
  if (!Present(body, "return_tokens_as_token_ids")) return absl::OkStatus();
  absl::StatusOr<bool> as_ids = Boolean(body, "return_tokens_as_token_ids", false);
  if (!as_ids.ok()) return as_ids.status();
  out->return_tokens_as_token_ids = *as_ids;
  return absl::OkStatus();
}

}  // namespace

pagoda::v1::GenerateRequest PromptRequest(const OpenAiRequest& request, size_t index) {
  pagoda::v1::GenerateRequest out = request.generate;
  if (index < request.prompts.size()) {
    out.clear_prompt();
    out.clear_prompt_token_ids();
    out.MergeFrom(request.prompts[index]);
  }
  return out;
}

bool NeedsOrderedBody(const json& body) {
  return body.is_object() && (body.contains("response_format") ||
                              body.contains("structured_outputs") || body.contains("tools") ||
                              body.contains("chat_template_kwargs") || body.contains("documents"));
}

absl::StatusOr<TokenizeRequest> ParseTokenizeRequest(const json& body,
                                                     const nlohmann::ordered_json* ordered) {
  if (!body.is_object()) return absl::InvalidArgumentError("body: must be a JSON object");
  TokenizeRequest out;
  if (Present(body, "model")) {
    if (!body["model"].is_string()) return InvalidField("model", "must be a string");
    out.model = body["model"].get<std::string>();
  }
  if (Present(body, "messages")) {
    OpenAiRequest chat;
    if (absl::Status status = ParseMessages(body, ordered, &chat); !status.ok()) return status;
    std::vector<std::string> names;
    if (absl::Status s = ParseToolList(body, ordered, &out.tools, &names); !s.ok()) return s;
    if (absl::Status s = ParseChatTemplateKwargs(body, ordered, &out.chat_template_kwargs);
        !s.ok()) {
      return s;
    }
    out.chat = true;
    out.messages = std::move(chat.messages);
    out.add_special_tokens = false;  // The template writes its own (vLLM's default).
  } else if (Present(body, "prompt") && body["prompt"].is_string()) {
    out.prompt = body["prompt"].get<std::string>();
  } else {
    return InvalidField("prompt", "required: a string (or messages)");
  }
  for (auto [key, field] : {std::pair{"add_special_tokens", &out.add_special_tokens},
                            std::pair{"add_generation_prompt", &out.add_generation_prompt},
                            std::pair{"continue_final_message", &out.continue_final_message},
                            std::pair{"return_token_strs", &out.return_token_strs}}) {
    if (!Present(body, key)) continue;
    if (!body[key].is_boolean()) return InvalidField(key, "must be a boolean");
    *field = body[key].get<bool>();
  }
  if (absl::Status both = CheckPromptEnding(out.add_generation_prompt, out.continue_final_message);
      !both.ok()) {
    return both;
  }
  return out;
}

absl::StatusOr<std::vector<int>> ParseDetokenizeRequest(const json& body, int vocab_size,
                                                        std::string* model) {
  if (!body.is_object()) return absl::InvalidArgumentError("body: must be a JSON object");
  if (Present(body, "model")) {
    if (!body["model"].is_string()) return InvalidField("model", "must be a string");
    *model = body["model"].get<std::string>();
  }
  if (!Present(body, "tokens") || !body["tokens"].is_array() ||
      body["tokens"].size() > kMaxPromptTokenIds) {
    return InvalidField(
        "tokens", absl::StrCat("required: an array of at most ", kMaxPromptTokenIds, " token ids"));
  }
  std::vector<int> ids;
  ids.reserve(body["tokens"].size());
  for (const json& id : body["tokens"]) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size) {
      return InvalidField("tokens", absl::StrCat("must hold token ids in [0, ", vocab_size, ")"));
    }
    ids.push_back(id.get<int>());
  }
  return ids;
}

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(const json& body, bool chat,
                                                 int default_chat_max_tokens) {
  return ParseOpenAiRequest(body, chat, default_chat_max_tokens, SamplingDefaults{});
}

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(const json& body, bool chat,
                                                 int default_chat_max_tokens,
                                                 const SamplingDefaults& defaults,
                                                 const nlohmann::ordered_json* ordered_body,
                                                 ToolCallParser tool_parser) {
  if (!body.is_object()) return absl::InvalidArgumentError("body: must be a JSON object");
  OpenAiRequest out;
  out.chat = chat;
  // Without a model the server's one model answers (as vLLM).
  if (Present(body, "model")) {
    if (!body["model"].is_string()) return InvalidField("model", "must be a string");
    out.model = body["model"].get<std::string>();
  }
  out.tool_parser = tool_parser;
  absl::Status status =
      chat ? ParseMessages(body, ordered_body, &out) : ParsePrompts(body, &out.prompts);
  if (status.ok() && !chat) out.generate.MergeFrom(out.prompts[0]);
  if (status.ok() && Present(body, "echo")) {
    if (!body["echo"].is_boolean()) {
      status = InvalidField("echo", "must be a boolean");
    } else if (body["echo"].get<bool>()) {
      if (chat) status = InvalidField("echo", "is only supported by /v1/completions");
      out.echo = true;
    }
  }
  if (status.ok() && chat) {
    absl::StatusOr<bool> add_generation_prompt = Boolean(body, "add_generation_prompt", true);
    absl::StatusOr<bool> continue_final = Boolean(body, "continue_final_message", false);
    status = !add_generation_prompt.ok() ? add_generation_prompt.status() : continue_final.status();
    out.add_generation_prompt = add_generation_prompt.value_or(true);
    out.continue_final_message = continue_final.value_or(false);
    if (status.ok()) {
      status = CheckPromptEnding(out.add_generation_prompt, out.continue_final_message);
    }
  }
  if (status.ok() && !chat && Present(body, "chat_template_kwargs")) {
    status = InvalidField("chat_template_kwargs", "only /v1/chat/completions takes them");
  }
  if (status.ok() && chat) {
    status = ParseChatTemplateKwargs(body, ordered_body, &out.chat_template_kwargs);
  }
  if (status.ok()) status = RefuseUnsupported(body);
  if (status.ok()) status = ParseConstraint(body, ordered_body, &out.generate);
  if (status.ok()) status = ParseToolChoice(body, ordered_body, &out);
  if (status.ok()) status = ParseSampling(body, defaults, &out);
  if (status.ok()) status = ParseLogprobs(body, &out);
  if (status.ok()) status = ParsePriority(body, &out);
  if (status.ok()) {
    // vLLM's max_tokens field defaults to 16 on completions, to null on chat.
    const bool sixteen = !chat && !body.contains("max_tokens");
    status = ParseStopping(
        body, sixteen ? 16 : defaults.max_tokens.value_or(default_chat_max_tokens), &out);
  }
  if (status.ok()) status = ParseStreaming(body, &out);
  if (status.ok()) status = ParseTokenIdOptions(body, &out);
  if (!status.ok()) return status;
  return out;
}

}  // namespace pagoda::scheduler
