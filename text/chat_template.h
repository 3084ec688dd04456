#ifndef PAGODA_TEXT_CHAT_TEMPLATE_H_
#define PAGODA_TEXT_CHAT_TEMPLATE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "text/jinja_template.h"

namespace pagoda::text {

// One message of a chat: its role ("system", "user", "assistant", ...) and
// its text.
struct ChatMessage {
  std::string role;
  std::string content;
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
  // From template text and the special tokens it may print.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> FromSource(const std::string& source,
                                                                  std::string bos_token,
                                                                  std::string eos_token);

  // INVALID_ARGUMENT when the template raises (e.g. roles that do not
  // alternate) or fails on the messages.
  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                     bool add_generation_prompt) const;

 private:
  ChatTemplate(jinja::Template compiled, std::string bos, std::string eos)
      : template_(std::move(compiled)), bos_token_(std::move(bos)), eos_token_(std::move(eos)) {}

  jinja::Template template_;
  std::string bos_token_;
  std::string eos_token_;
};

}  // namespace pagoda::text

#endif  // PAGODA_TEXT_CHAT_TEMPLATE_H_
