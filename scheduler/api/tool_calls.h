#ifndef PAGODA_SCHEDULER_API_TOOL_CALLS_H_
#define PAGODA_SCHEDULER_API_TOOL_CALLS_H_

// OpenAI tool calling in /v1/chat/completions, as vLLM does it: `tools` go
// to the chat template; tool_choice "required" and a named function are
// constrained decoding (the output is the function's arguments, or a JSON
// array of {"name", "parameters"} calls, validated by the tools' schemas);
// "auto" leaves the model free and reads its calls back with the server's
// --tool-call-parser: `hermes` (<tool_call>{"name", "arguments"}</tool_call>
// blocks, Qwen and Hermes models) or `llama3_json` (Llama 3.1's
// {"name", "parameters"} JSON, after an optional <|python_tag|>). Pure
// functions and a per-choice stream state; thread-compatible.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace pagoda::scheduler {

enum class ToolCallParser { kNone, kHermes, kLlama3Json };
// "" (none), "hermes" or "llama3_json"; INVALID_ARGUMENT otherwise.
absl::StatusOr<ToolCallParser> ParseToolCallParserName(const std::string& name);

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

// A chat request's tools, as parsed.
struct ToolsRequest {
  nlohmann::ordered_json tools;  // OpenAI's array as the client wrote it; null for none.
  ToolChoice choice = ToolChoice::kNone;
  std::string named;      // kNamed: the function.
  bool parallel = true;   // parallel_tool_calls: several calls under kRequired.
};

inline constexpr int kMaxTools = 128;

// Reads a body's `tools` into `tools` (null when absent, null or empty)
// and their names into `names`; INVALID_ARGUMENT naming the field as
// ParseTools below. For /tokenize, which renders tools but calls none.
absl::Status ParseToolList(const nlohmann::json& body, const nlohmann::ordered_json* ordered,
                           nlohmann::ordered_json* tools, std::vector<std::string>* names);

// Reads tools, tool_choice and parallel_tool_calls of a chat body
// (`ordered`: the same body parsed keeping key order, or null). Defaults as
// OpenAI: tool_choice "auto" with tools, "none" without. INVALID_ARGUMENT
// naming the field: more than kMaxTools, a tool that is not
// {"type": "function", "function": {"name", "parameters"?...}}, a name
// outside [A-Za-z0-9_-]{1,64} or given twice, parameters not an object,
// a tool_choice naming an unknown function, "auto" without `parser`.
absl::Status ParseTools(const nlohmann::json& body, const nlohmann::ordered_json* ordered,
                        ToolCallParser parser, ToolsRequest* out);

// The JSON Schema the output must follow under "required" (an array of
// 1.. calls, 1 unless parallel, each {"name": const, "parameters": the
// tool's parameters}; each tool's $defs hoisted) or a named function (its
// parameters). INVALID_ARGUMENT for a $ref that cannot be hoisted.
absl::StatusOr<std::string> ToolCallSchema(const ToolsRequest& tools);

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text.
};

// A finished choice's text split into content and tool calls.
struct ToolCallsReply {
  std::string content;
  bool content_null = false;
  std::vector<ToolCall> calls;
};
ToolCallsReply ExtractToolCalls(const ToolsRequest& tools, ToolCallParser parser,
                                const std::string& text);

// OpenAI's tool_calls array: ids "call_<prefix>_<i>". With `indexed`
// (stream deltas), each entry carries its "index".
nlohmann::json ToolCallsJson(const std::vector<ToolCall>& calls, const std::string& id_prefix,
                             bool indexed);

// One streamed choice: which text goes out as content now, and what is held
// back for the tool calls read at the end. Not thread-safe.
class ToolCallStream {
 public:
  ToolCallStream(const ToolsRequest* tools, ToolCallParser parser, std::string id_prefix)
      : tools_(tools), parser_(parser), id_prefix_(std::move(id_prefix)) {}

  // The delta of this step: "content" text and/or "tool_calls" entries
  // (a named function's arguments stream as they come); null when nothing
  // is to be sent.
  nlohmann::json Feed(const std::string& text);
  // At the choice's end: the rest of the content and every tool call held
  // back (null when nothing), and whether any call was made.
  nlohmann::json Finish(bool* made_calls);

 private:
  const ToolsRequest* tools_;
  const ToolCallParser parser_;
  const std::string id_prefix_;
  std::string held_;         // Text not sent yet.
  bool capturing_ = false;   // Past the start of a tool call: held to the end.
  bool named_started_ = false;
  bool plain_ = false;       // llama3_json: the text is no call.
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_TOOL_CALLS_H_
