// chat_template_tool: renders conversations with Pagoda's chat-template
// interpreter, for comparison with python3-jinja2.
//
//   chat_template_tool TEMPLATE_FILE < request.json > response.json
// request:  {"bos_token": "...", "eos_token": "...",
//            "cases": [{"messages": [{"role", "content"}], "add_generation_prompt": b,
//                       "tools"?: [...], "variables"?: {name: value},
//                       "continue_final_message"?: b}]}
// response: {"parse_error": msg} or {"results": [{"text": ...} or {"error": msg}],
//            "content_format": "string" or "openai" (vLLM's "auto" detection)}
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "text/chat_template.h"

int main(int argc, char** argv) {
  using json = nlohmann::ordered_json;
  if (argc != 2) {
    std::cerr << "usage: chat_template_tool TEMPLATE_FILE < request.json\n";
    return 2;
  }
  std::ifstream file(argv[1], std::ios::binary);
  std::stringstream source;
  source << file.rdbuf();
  const std::string input((std::istreambuf_iterator<char>(std::cin)),
                          std::istreambuf_iterator<char>());
  const json request = json::parse(input);
  auto chat = pagoda::text::ChatTemplate::FromSource(
      source.str(), request.value("bos_token", ""), request.value("eos_token", ""));
  if (!chat.ok()) {
    std::cout << json{{"parse_error", std::string(chat.status().message())}}.dump() << "\n";
    return 0;
  }
  json results = json::array();
  for (const json& item : request["cases"]) {
    std::vector<pagoda::text::ChatMessage> messages;
    for (const json& message : item["messages"]) {
      pagoda::text::ChatMessage parsed;
      parsed.role = message["role"].get<std::string>();
      parsed.content_null = message["content"].is_null();
      if (!parsed.content_null) parsed.content = message["content"].get<std::string>();
      parsed.fields = message;
      messages.push_back(std::move(parsed));
    }
    auto text = (*chat)->Render(messages, item.value("add_generation_prompt", false),
                                item.contains("tools") ? item["tools"] : json(),
                                item.contains("variables") ? item["variables"] : json(),
                                pagoda::text::ChatContentFormat::kString,
                                item.value("continue_final_message", false));
    results.push_back(text.ok() ? json{{"text", *text}}
                                : json{{"error", std::string(text.status().message())}});
  }
  const json response = {
      {"results", results},
      {"content_format", pagoda::text::ChatContentFormatName((*chat)->detected_content_format())}};
  std::cout << response.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  return 0;
}
