// A chat template as the server loads it (--chat-template, or the model's
// chat_template) and renders it for each chat request: the Jinja subset's
// parser and interpreter (text/jinja_*). Input: the template source, then
// optionally NUL-separated message contents (roles alternate user,
// assistant; without any, a fixed four-message chat with a system prompt).
// add_generation_prompt is set when the input's length is even. The
// template's content format is detected (its syntax tree walked, as the
// server does at start) and the render hands each content in it.
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_support.h"
#include "text/chat_template.h"

using pagoda::text::ChatMessage;
using pagoda::text::ChatTemplate;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = pagoda::fuzz::AsText(data, size);
  size_t split = input.find('\0');
  const std::string source(input.substr(0, split));
  std::vector<ChatMessage> messages;
  if (split == std::string_view::npos) {
    messages = {{"system", "Be brief."},
                {"user", "Hi, who are you?"},
                {"assistant", "A model."},
                {"user", "Tell me more \"quoted\" {{ not a tag }}"}};
  } else {
    const char* roles[] = {"user", "assistant"};
    while (split != std::string_view::npos) {
      const size_t next = input.find('\0', split + 1);
      const size_t end = next == std::string_view::npos ? input.size() : next;
      messages.push_back(
          {roles[messages.size() % 2], std::string(input.substr(split + 1, end - split - 1))});
      split = next;
    }
  }
  // A 256th of the service's render budget (16,384 units, 38 times what the
  // real templates take on tests/chat_template's conversations): inputs
  // that loop up to the budget dominate the run's time, and this makes it
  // about 7 times faster (1,871 against 252 executions a second); the
  // refusal is reached the same way, and the unit tests check the
  // service's own budget.
  absl::StatusOr<std::unique_ptr<ChatTemplate>> compiled = ChatTemplate::FromSource(
      source, "<s>", "</s>", pagoda::text::jinja::kDefaultMaxRenderWork / 256);
  if (!compiled.ok()) return 0;
  (*compiled)
      ->Render(messages, /*add_generation_prompt=*/size % 2 == 0, nullptr, nullptr,
               (*compiled)->detected_content_format())
      .IgnoreError();
  return 0;
}
