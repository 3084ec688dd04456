#ifndef PAGODA_TEXT_CHAT_TEMPLATE_H_
#define PAGODA_TEXT_CHAT_TEMPLATE_H_

// ChatTemplate: a model's Jinja chat template rendered over the request's
// messages, tools and variables into a prompt.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "text/chat_content_format.h"
#include "text/jinja_template.h"

namespace pagoda::text {

// One message of a chat: its role ("system", "user", "assistant", "tool",
// ...), its text, and the message's other fields the template may read
// (OpenAI's tool_calls of an assistant message, tool_call_id and name of a
// tool result) as the client wrote them, role and content included (their
// values are replaced by `role` and `content`, their place kept).
struct ChatMessage {
  std::string role;
  std::string content;
  // The content's text parts as the client gave them (a string content is
  // one part, a null content none): what the template sees under
  // ChatContentFormat::kOpenAi. Empty with a `content`: that is the one part.
  std::vector<std::string> parts;
  nlohmann::ordered_json fields = nlohmann::ordered_json::object();
  // A null content (an assistant message that only calls tools).
  bool content_null = false;
};

// A model's chat template: turns chat messages into the prompt text, as
// transformers' apply_chat_template(tokenize=False) does, with the
// variables messages, add_generation_prompt, bos_token and eos_token.
// Immutable and thread-safe.
class ChatTemplate {
 public:
  // Reads `override_file` when given (--chat-template), else the model's
  // chat_template.jinja or tokenizer_config.json "chat_template" (a string,
  // or a list of named templates: "default" is used). nullptr when the model
  // has none; INVALID_ARGUMENT when the template is outside the supported
  // Jinja subset (jinja_template.h), so the server refuses to start.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> Load(const std::string& model_dir,
                                                            const std::string& override_file);
  // From template text and the special tokens it may print; each render
  // may do `max_render_work` units (jinja_template.h).
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> FromSource(
      const std::string& source, std::string bos_token, std::string eos_token,
      int64_t max_render_work = jinja::kDefaultMaxRenderWork);

  // INVALID_ARGUMENT when the template raises (e.g. roles that do not
  // alternate) or fails on the messages.
  // `tools` (OpenAI's tools array, or null) is the template's `tools`
  // variable, as transformers passes it. `variables` (an object, or null)
  // adds template variables, as transformers' apply_chat_template keyword
  // arguments (Llama 3.1's date_string, tools_in_user_message): they may
  // replace bos_token and eos_token; naming messages, tools or
  // add_generation_prompt is INVALID_ARGUMENT, as in Python.
  // `format`: how each message's content reaches the template (its text,
  // or OpenAI's list of text parts). `continue_final_message`:
  // transformers' flag of that name, the prompt cut right after the last
  // message's text so that the model continues it (the text, or its last
  // text part, is marked, rendered and cut at the mark; INVALID_ARGUMENT
  // with transformers' message when the template drops the mark or the
  // text, or the message has no text).
  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                     bool add_generation_prompt,
                                     const nlohmann::ordered_json& tools = nullptr,
                                     const nlohmann::ordered_json& variables = nullptr,
                                     ChatContentFormat format = ChatContentFormat::kString,
                                     bool continue_final_message = false) const;
  // The content format vLLM's "auto" finds in this template.
  ChatContentFormat detected_content_format() const {
    return DetectChatContentFormat(template_.root());
  }

 private:
  ChatTemplate(jinja::Template compiled, std::string bos, std::string eos, bool reads_content)
      : template_(std::move(compiled)),
        bos_token_(std::move(bos)),
        eos_token_(std::move(eos)),
        reads_content_(reads_content) {}

  absl::StatusOr<std::string> RenderMessages(const std::vector<ChatMessage>& messages,
                                             bool add_generation_prompt,
                                             const nlohmann::ordered_json& tools,
                                             const nlohmann::ordered_json& variables,
                                             ChatContentFormat format) const;
  absl::StatusOr<std::string> RenderContinued(std::vector<ChatMessage> messages,
                                              bool add_generation_prompt,
                                              const nlohmann::ordered_json& tools,
                                              const nlohmann::ordered_json& variables,
                                              ChatContentFormat format) const;

  jinja::Template template_;
  std::string bos_token_;
  std::string eos_token_;
  bool reads_content_;  // The source says "content" (transformers' check).
};

}  // namespace pagoda::text

#endif  // PAGODA_TEXT_CHAT_TEMPLATE_H_
