#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "scheduler/api/field_error.h"
#include "scheduler/api/json_body.h"
#include "scheduler/api/openai_body_parts.h"
#include "scheduler/api/tool_calls.h"

namespace pagoda::scheduler::openai_body {
namespace {

// A message's fields beyond role and content kept for the chat template, in
// the client's key order: an assistant's tool_calls (a call's arguments
// given as a JSON string handed to the template as the object it spells)
// and its reasoning (the template sees it as `reasoning` and
// `reasoning_content`, for templates that replay earlier thinking), a tool
// result's tool_call_id, a name; as vLLM hands them over.
absl::Status KeepTemplateFields(const json& message, const nlohmann::ordered_json* ordered,
                                const std::string& field, ChatMessage* parsed) {
  if (!message.contains("tool_calls") && !message.contains("tool_call_id") &&
      !message.contains("name") && !message.contains("reasoning") &&
      !message.contains("reasoning_content")) {
    return absl::OkStatus();
  }
  nlohmann::ordered_json fields = ordered != nullptr ? *ordered : nlohmann::ordered_json(message);
  // vLLM renames the deprecated reasoning_content to reasoning.
  if ((!fields.contains("reasoning") || fields["reasoning"].is_null()) &&
      fields.contains("reasoning_content") && !fields["reasoning_content"].is_null()) {
    fields["reasoning"] = fields["reasoning_content"];
  }
  if (fields.contains("reasoning") && !fields["reasoning"].is_null()) {
    if (!fields["reasoning"].is_string()) return InvalidField(field, "reasoning must be a string");
    if (parsed->role == "assistant") fields["reasoning_content"] = fields["reasoning"];
  }
  if (fields.contains("tool_calls")) {
    if (!fields["tool_calls"].is_array()) return InvalidField(field, "tool_calls must be an array");
    for (nlohmann::ordered_json& call : fields["tool_calls"]) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) {
        return InvalidField(field, "each tool call needs a function");
      }
      nlohmann::ordered_json& arguments = call["function"]["arguments"];
      if (arguments.is_string()) {
        nlohmann::ordered_json parsed_arguments =
            ParseOrderedJsonOrDiscarded(arguments.get<std::string>());
        if (parsed_arguments.is_object()) arguments = std::move(parsed_arguments);
      }
    }
  }
  // A null content stays "" (as for every message): templates such as
  // Qwen3's test `'</think>' in message.content`, which a null breaks.
  parsed->fields = std::move(fields);
  return absl::OkStatus();
}

// vLLM's reasoning_effort and documents (its build_chat_params): template
// variables; reasoning_effort also sets enable_thinking (false for "none")
// unless chat_template_kwargs sets it, so that templates whose thinking is
// opt-in think when asked.
absl::Status AddChatParams(const json& body, const nlohmann::ordered_json* ordered,
                           nlohmann::ordered_json* variables) {
  if (Present(body, "reasoning_effort")) {
    const json& effort = body["reasoning_effort"];
    constexpr const char* kEfforts[] = {"none", "minimal", "low", "medium", "high", "xhigh", "max"};
    if (!effort.is_string() || std::none_of(std::begin(kEfforts), std::end(kEfforts),
                                            [&](const char* e) { return effort == e; })) {
      return InvalidField("reasoning_effort",
                          "must be none, minimal, low, medium, high, xhigh or max");
    }
    if (!variables->is_object()) *variables = nlohmann::ordered_json::object();
    (*variables)["reasoning_effort"] = effort.get<std::string>();
    if (!variables->contains("enable_thinking")) (*variables)["enable_thinking"] = effort != "none";
  }
  if (!Present(body, "documents")) return absl::OkStatus();
  const json& documents = body["documents"];
  const bool valid = documents.is_array() && documents.size() <= kMaxDocuments &&
                     std::all_of(documents.begin(), documents.end(), [](const json& document) {
                       return document.is_object() &&
                              std::all_of(document.begin(), document.end(),
                                          [](const json& value) { return value.is_string(); });
                     });
  if (!valid) {
    return InvalidField("documents", absl::StrCat("must be at most ", kMaxDocuments,
                                                  " objects of strings (e.g. title, text)"));
  }
  if (!variables->is_object()) *variables = nlohmann::ordered_json::object();
  (*variables)["documents"] = ordered != nullptr && ordered->contains("documents")
                                  ? (*ordered)["documents"]
                                  : nlohmann::ordered_json(documents);
  return absl::OkStatus();
}

}  // namespace

// vLLM's chat_template_kwargs: an object of at most kMaxChatTemplateKwargs
// variables named as Jinja names (the template refuses the request's own:
// messages, tools, add_generation_prompt).
absl::Status ParseChatTemplateKwargs(const json& body, const nlohmann::ordered_json* ordered,
                                     nlohmann::ordered_json* out) {
  if (!Present(body, "chat_template_kwargs")) return AddChatParams(body, ordered, out);
  const json& kwargs = body["chat_template_kwargs"];
  if (!kwargs.is_object() || kwargs.size() > kMaxChatTemplateKwargs) {
    return InvalidField("chat_template_kwargs", absl::StrCat("must be an object of at most ",
                                                             kMaxChatTemplateKwargs, " variables"));
  }
  for (const auto& [name, value] : kwargs.items()) {
    const bool valid = !name.empty() && name.size() <= 64 &&
                       !absl::ascii_isdigit(static_cast<unsigned char>(name[0])) &&
                       std::all_of(name.begin(), name.end(), [](char c) {
                         return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
                       });
    if (!valid) {
      return InvalidField("chat_template_kwargs",
                          absl::StrCat("\"", name.substr(0, 64),
                                       "\" is not a variable name ([A-Za-z_][A-Za-z0-9_]{0,63})"));
    }
  }
  *out = ordered != nullptr && ordered->contains("chat_template_kwargs")
             ? (*ordered)["chat_template_kwargs"]
             : nlohmann::ordered_json(kwargs);
  return AddChatParams(body, ordered, out);
}

absl::Status ParseMessages(const json& body, const nlohmann::ordered_json* ordered,
                           OpenAiRequest* out) {
  if (!Present(body, "messages") || !body["messages"].is_array() || body["messages"].empty()) {
    return InvalidField("messages", "required: a non-empty array");
  }
  if (body["messages"].size() > kMaxMessages) {
    return InvalidField("messages", absl::StrCat("at most ", kMaxMessages));
  }
  for (size_t i = 0; i < body["messages"].size(); ++i) {
    const json& message = body["messages"][i];
    const std::string field = absl::StrCat("messages[", i, "]");
    if (!message.is_object() || !message.contains("role") || !message["role"].is_string()) {
      return InvalidField(field, "needs a string role");
    }
    ChatMessage parsed{message["role"].get<std::string>(), ""};
    const json content = message.value("content", json());
    if (content.is_string()) {
      parsed.content = content.get<std::string>();
      parsed.parts.push_back(parsed.content);
    } else if (content.is_array()) {
      // Content parts: only text parts are understood, one per line (vLLM's
      // "string" content format).
      for (size_t p = 0; p < content.size(); ++p) {
        const json& part = content[p];
        if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
            !part.contains("text") || !part["text"].is_string()) {
          return InvalidField(field, "content parts must be {\"type\": \"text\", \"text\": ...}");
        }
        if (p > 0) parsed.content += '\n';
        parsed.content += part["text"].get<std::string>();
        parsed.parts.push_back(part["text"].get<std::string>());
      }
    } else if (!content.is_null()) {
      return InvalidField(field, "content must be a string or text parts");
    }
    const nlohmann::ordered_json* ordered_message =
        ordered != nullptr && ordered->contains("messages") && (*ordered)["messages"].size() > i
            ? &(*ordered)["messages"][i]
            : nullptr;
    if (absl::Status s = KeepTemplateFields(message, ordered_message, field, &parsed); !s.ok())
      return s;
    out->messages.push_back(std::move(parsed));
  }
  return absl::OkStatus();
}

// tools, tool_choice, parallel_tool_calls (tool_calls.h); "required" and a
// named function become the request's JSON Schema constraint.
absl::Status ParseToolChoice(const json& body, const nlohmann::ordered_json* ordered,
                             OpenAiRequest* out) {
  if (!out->chat) {
    if (Present(body, "tools") || Present(body, "tool_choice")) {
      return InvalidField("tools", "only /v1/chat/completions takes tools");
    }
    return absl::OkStatus();
  }
  if (absl::Status s = ParseTools(body, ordered, out->tool_parser, &out->tools); !s.ok()) return s;
  if (out->tools.choice != ToolChoice::kRequired && out->tools.choice != ToolChoice::kNamed) {
    return absl::OkStatus();
  }
  if (out->generate.constraint_case() != pagoda::v1::GenerateRequest::CONSTRAINT_NOT_SET) {
    return InvalidField("tool_choice",
                        "\"required\" or a function cannot be combined with "
                        "response_format or structured_outputs");
  }
  absl::StatusOr<std::string> schema = ToolCallSchema(out->tools);
  if (!schema.ok()) return schema.status();
  out->generate.set_json_schema(*schema);
  return absl::OkStatus();
}

}  // namespace pagoda::scheduler::openai_body
