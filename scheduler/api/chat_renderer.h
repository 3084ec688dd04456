// How the OpenAI routes turn chat messages into a prompt: a function the
// start-up builds from the model's chat template, so that the routes know
// neither the template engine nor where the template came from.
#ifndef PAGODA_SCHEDULER_API_CHAT_RENDERER_H_
#define PAGODA_SCHEDULER_API_CHAT_RENDERER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "text/chat_template.h"

namespace pagoda::scheduler {

// Renders chat messages into a prompt (the model's chat template), with the
// request's tools (OpenAI's array, or null) and chat_template_kwargs (an
// object, or null); `continue_final_message`: the prompt ends inside the
// last message (ChatTemplate::Render).
using ChatRenderer = std::function<absl::StatusOr<std::string>(
    const std::vector<text::ChatMessage>& messages, bool add_generation_prompt,
    bool continue_final_message, const nlohmann::ordered_json& tools,
    const nlohmann::ordered_json& variables)>;

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_CHAT_RENDERER_H_
