#include "text/chat_template.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace pagoda::text {
namespace {

using nlohmann::json;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// A special token in tokenizer_config.json: a string or {"content": ...}.
std::string TokenText(const json& config, const char* key) {
  if (!config.contains(key)) return "";
  const json& token = config[key];
  if (token.is_string()) return token.get<std::string>();
  if (token.is_object() && token.contains("content") && token["content"].is_string()) {
    return token["content"].get<std::string>();
  }
  return "";
}

std::string TemplateFromConfig(const json& config) {
  if (!config.contains("chat_template")) return "";
  const json& chat_template = config["chat_template"];
  if (chat_template.is_string()) return chat_template.get<std::string>();
  if (chat_template.is_array()) {
    for (const json& entry : chat_template) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        return entry["template"].get<std::string>();
      }
    }
  }
  return "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::Load(const std::string& model_dir,
                                                                 const std::string& override_file) {
  const std::filesystem::path dir(model_dir);
  json config = json::object();
  std::error_code error;
  if (std::filesystem::exists(dir / "tokenizer_config.json", error)) {
    absl::StatusOr<std::string> text = ReadFile((dir / "tokenizer_config.json").string());
    if (!text.ok()) return text.status();
    config = json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat((dir / "tokenizer_config.json").string(), ": not a JSON object"));
    }
  }
  std::string source;
  std::string origin;
  if (!override_file.empty()) {
    absl::StatusOr<std::string> text = ReadFile(override_file);
    if (!text.ok()) return text.status();
    source = *text;
    origin = override_file;
  } else if (std::filesystem::exists(dir / "chat_template.jinja", error)) {
    absl::StatusOr<std::string> text = ReadFile((dir / "chat_template.jinja").string());
    if (!text.ok()) return text.status();
    source = *text;
    origin = (dir / "chat_template.jinja").string();
  } else {
    source = TemplateFromConfig(config);
    origin = (dir / "tokenizer_config.json").string();
  }
  if (source.empty()) return std::unique_ptr<ChatTemplate>();
  absl::StatusOr<std::unique_ptr<ChatTemplate>> loaded =
      FromSource(source, TokenText(config, "bos_token"), TokenText(config, "eos_token"));
  if (!loaded.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": ", loaded.status().message()));
  }
  return loaded;
}

namespace {

// transformers' continue_final_message mark (its trailing space tells
// whether the template trimmed the message).
constexpr char kContinueTag[] = "CONTINUE_FINAL_MESSAGE_TAG ";

// A message's content as `format` hands it to the template.
nlohmann::ordered_json ContentValue(const ChatMessage& message, ChatContentFormat format) {
  if (format == ChatContentFormat::kString) {
    return message.content_null ? nlohmann::ordered_json()
                                : nlohmann::ordered_json(message.content);
  }
  nlohmann::ordered_json parts = nlohmann::ordered_json::array();
  if (message.content_null) return parts;
  auto add = [&parts](const std::string& text) {
    parts.push_back({{"type", "text"}, {"text", text}});
  };
  if (message.parts.empty() && !message.content.empty()) add(message.content);
  for (const std::string& part : message.parts) add(part);
  return parts;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::FromSource(const std::string& source,
                                                                       std::string bos_token,
                                                                       std::string eos_token,
                                                                       int64_t max_render_work) {
  absl::StatusOr<jinja::Template> compiled = jinja::Template::Parse(source, max_render_work);
  if (!compiled.ok()) return compiled.status();
  return std::unique_ptr<ChatTemplate>(
      new ChatTemplate(*std::move(compiled), std::move(bos_token), std::move(eos_token),
                       source.find("content") != std::string::npos));
}

absl::StatusOr<std::string> ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                                 bool add_generation_prompt,
                                                 const nlohmann::ordered_json& tools,
                                                 const nlohmann::ordered_json& variables,
                                                 ChatContentFormat format,
                                                 bool continue_final_message) const {
  if (continue_final_message) {
    return RenderContinued(messages, add_generation_prompt, tools, variables, format);
  }
  return RenderMessages(messages, add_generation_prompt, tools, variables, format);
}

// transformers' continue_final_message (render_jinja_template): the final
// message's text, or its last text part, gets kContinueTag; the render is
// cut where the tag starts (and right-stripped when the template trimmed
// the tag's space), so the prompt ends inside that message. Whitespace is
// ASCII's where Python strips Unicode's.
absl::StatusOr<std::string> ChatTemplate::RenderContinued(std::vector<ChatMessage> messages,
                                                          bool add_generation_prompt,
                                                          const nlohmann::ordered_json& tools,
                                                          const nlohmann::ordered_json& variables,
                                                          ChatContentFormat format) const {
  if (messages.empty() || messages.back().content_null) {
    return absl::InvalidArgumentError(
        "continue_final_message is set but the final message has no \"content\" to continue!");
  }
  if (!reads_content_) {
    return absl::InvalidArgumentError(
        "continue_final_message is set to \"content\" but this is not an accepted field in the "
        "chat_template");
  }
  ChatMessage& final = messages.back();
  if (final.parts.empty() && !final.content.empty()) final.parts.push_back(final.content);
  if (format == ChatContentFormat::kOpenAi && final.parts.empty()) {
    return absl::InvalidArgumentError(
        "continue_final_message is set but we could not find any text to continue in the final "
        "message!");
  }
  std::string& marked = format == ChatContentFormat::kOpenAi ? final.parts.back() : final.content;
  const std::string text(absl::StripAsciiWhitespace(marked));
  marked += kContinueTag;
  absl::StatusOr<std::string> rendered =
      RenderMessages(messages, add_generation_prompt, tools, variables, format);
  if (!rendered.ok()) return rendered.status();
  const std::string tag(absl::StripAsciiWhitespace(kContinueTag));
  if (rendered->find(text) == std::string::npos || rendered->find(tag) == std::string::npos) {
    return absl::InvalidArgumentError(
        "continue_final_message is set but the final message does not appear in the chat after "
        "applying the chat template! This can happen if the chat template deletes portions of the "
        "final message.");
  }
  const size_t at = rendered->rfind(tag);
  const bool kept = rendered->compare(at, sizeof(kContinueTag) - 1, kContinueTag) == 0;
  rendered->resize(at);
  if (!kept) rendered->resize(absl::StripTrailingAsciiWhitespace(*rendered).size());
  return rendered;
}

absl::StatusOr<std::string> ChatTemplate::RenderMessages(const std::vector<ChatMessage>& messages,
                                                         bool add_generation_prompt,
                                                         const nlohmann::ordered_json& tools,
                                                         const nlohmann::ordered_json& variables,
                                                         ChatContentFormat format) const {
  jinja::List list;
  for (const ChatMessage& message : messages) {
    // The client's fields in the client's order (tojson prints them so);
    // role and content set from the message.
    nlohmann::ordered_json fields =
        message.fields.is_object() ? message.fields : nlohmann::ordered_json::object();
    fields["role"] = message.role;
    fields["content"] = ContentValue(message, format);
    list.push_back(jinja::FromJson(fields));
  }
  jinja::Dict context{{"messages", jinja::Value(std::move(list))},
                      {"add_generation_prompt", jinja::Value(add_generation_prompt)},
                      {"bos_token", jinja::Value(bos_token_)},
                      {"eos_token", jinja::Value(eos_token_)}};
  if (!tools.is_null()) context.emplace_back("tools", jinja::FromJson(tools));
  if (variables.is_object()) {
    for (const auto& [name, value] : variables.items()) {
      if (name == "messages" || name == "tools" || name == "add_generation_prompt") {
        return absl::InvalidArgumentError(
            absl::StrCat("chat template variable ", name, " is set by the request itself"));
      }
      auto named = [&name = name](const auto& entry) { return entry.first == name; };
      auto at = std::find_if(context.begin(), context.end(), named);
      if (at == context.end()) {
        context.emplace_back(name, jinja::FromJson(value));
      } else {
        at->second = jinja::FromJson(value);  // bos_token or eos_token.
      }
    }
  }
  return template_.Render(jinja::Value(std::move(context)));
}

}  // namespace pagoda::text
