#ifndef PAGODA_TEXT_CHAT_CONTENT_FORMAT_H_
#define PAGODA_TEXT_CHAT_CONTENT_FORMAT_H_

// How a chat message's content reaches the chat template, as vLLM's
// --chat-template-content-format says: as a string (text parts one per
// line) or as OpenAI's list of {"type": "text", "text": ...} parts, which
// templates that loop over a message's content expect. "auto" reads the
// template's syntax tree the way vLLM does: a loop over a message's content
// (`for part in message['content']`, `message.content | selectattr(...)`,
// the message taken from a loop over `messages`, a slice of it or a
// variable set from it) means the list.

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "text/jinja_ast.h"

namespace pagoda::text {

enum class ChatContentFormat { kString, kOpenAi };

// "auto" (nullopt), "string" or "openai"; INVALID_ARGUMENT otherwise.
absl::StatusOr<std::optional<ChatContentFormat>> ParseChatContentFormat(const std::string& name);

const char* ChatContentFormatName(ChatContentFormat format);

// vLLM's detection over a parsed template (jinja::Template::root()).
ChatContentFormat DetectChatContentFormat(const jinja::Node& root);

}  // namespace pagoda::text

#endif  // PAGODA_TEXT_CHAT_CONTENT_FORMAT_H_
