#include "scheduler/api/tool_calls.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "scheduler/api/field_error.h"
#include "scheduler/api/json_body.h"

namespace pagoda::scheduler {
namespace {

using nlohmann::json;
using ordered_json = nlohmann::ordered_json;

constexpr char kHermesOpen[] = "<tool_call>";
constexpr char kHermesClose[] = "</tool_call>";
constexpr char kPythonTag[] = "<|python_tag|>";

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

absl::Status CheckTool(const ordered_json& tool, size_t i, std::vector<std::string>* names) {
  const std::string field = absl::StrCat("tools[", i, "]");
  if (!tool.is_object() || !tool.contains("type") || tool["type"] != "function" ||
      !tool.contains("function") ||
      !tool["function"].is_object()) {
    return InvalidField(field, "must be {\"type\": \"function\", \"function\": {...}}");
  }
  const ordered_json& function = tool["function"];
  if (!function.contains("name") || !function["name"].is_string() ||
      !ValidName(function["name"].get<std::string>())) {
    return InvalidField(field + ".function.name", "must be 1 to 64 of [A-Za-z0-9_-]");
  }
  if (function.contains("parameters") && !function["parameters"].is_object()) {
    return InvalidField(field + ".function.parameters", "must be a JSON Schema object");
  }
  const std::string name = function["name"].get<std::string>();
  if (std::find(names->begin(), names->end(), name) != names->end()) {
    return InvalidField(field + ".function.name", absl::StrCat("\"", name, "\" is given twice"));
  }
  names->push_back(name);
  return absl::OkStatus();
}

absl::Status ParseChoice(const json& body, const std::vector<std::string>& names,
                         ToolsRequest* out) {
  out->choice = ToolChoice::kAuto;
  if (!body.contains("tool_choice") || body["tool_choice"].is_null()) return absl::OkStatus();
  const json& choice = body["tool_choice"];
  if (choice.is_string()) {
    const std::string mode = choice.get<std::string>();
    if (mode == "none") out->choice = ToolChoice::kNone;
    else if (mode == "required") out->choice = ToolChoice::kRequired;
    else if (mode != "auto")
      return InvalidField("tool_choice", "must be none, auto, required or a function");
    return absl::OkStatus();
  }
  if (!choice.is_object() || !choice.contains("type") || choice["type"] != "function" ||
      !choice.contains("function") || !choice["function"].is_object() ||
      !choice["function"].contains("name") || !choice["function"]["name"].is_string()) {
    return InvalidField("tool_choice",
                        "must be none, auto, required or {\"type\": \"function\", "
                        "\"function\": {\"name\": ...}}");
  }
  out->named = choice["function"]["name"].get<std::string>();
  if (std::find(names.begin(), names.end(), out->named) == names.end()) {
    return InvalidField("tool_choice.function.name",
                        absl::StrCat("\"", out->named.substr(0, 64), "\" is not among the tools"));
  }
  out->choice = ToolChoice::kNamed;
  return absl::OkStatus();
}

const ordered_json& ParametersOf(const ordered_json& tool) {
  static const ordered_json* const kEmpty =
      new ordered_json({{"type", "object"}, {"properties", ordered_json::object()}});
  const ordered_json& function = tool["function"];
  return function.contains("parameters") ? function["parameters"] : *kEmpty;
}

// Rewrites a tool's local references to its hoisted $defs (prefix__name).
absl::Status Rehome(ordered_json& node, const std::string& prefix) {
  if (node.is_array()) {
    for (ordered_json& item : node) {
      if (absl::Status s = Rehome(item, prefix); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (!node.is_object()) return absl::OkStatus();
  for (auto& [key, value] : node.items()) {
    if (key == "$ref" && value.is_string()) {
      const std::string ref = value.get<std::string>();
      for (const char* base : {"#/$defs/", "#/definitions/"}) {
        if (ref.rfind(base, 0) == 0 && ref.find('/', std::string(base).size()) == std::string::npos) {
          value = absl::StrCat("#/$defs/", prefix, "__", ref.substr(std::string(base).size()));
          break;
        }
      }
      if (value.get<std::string>() == ref) {
        return InvalidField("tools", absl::StrCat("$ref \"", ref.substr(0, 64),
                                                  "\" cannot be used with tool_choice required "
                                                  "(only #/$defs/NAME)"));
      }
    } else if (absl::Status s = Rehome(value, prefix); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

bool ParseCall(const ordered_json& value, const char* arguments_key, ToolCall* call) {
  if (!value.is_object() || !value.contains("name") || !value["name"].is_string()) return false;
  const char* key = value.contains(arguments_key) ? arguments_key
                    : value.contains("arguments") ? "arguments"
                    : value.contains("parameters") ? "parameters" : nullptr;
  call->name = value["name"].get<std::string>();
  call->arguments = key == nullptr ? "{}" : value[key].is_string() ? value[key].get<std::string>()
                                                                   : value[key].dump();
  return true;
}

ToolCallsReply ParseHermes(const std::string& text) {
  ToolCallsReply reply;
  size_t at = 0;
  while (true) {
    const size_t open = text.find(kHermesOpen, at);
    if (open == std::string::npos) {
      reply.content += text.substr(at);
      break;
    }
    reply.content += text.substr(at, open - at);
    const size_t body = open + std::string(kHermesOpen).size();
    size_t close = text.find(kHermesClose, body);
    const size_t end = close == std::string::npos ? text.size() : close + std::string(kHermesClose).size();
    if (close == std::string::npos) close = text.size();
    const ordered_json value = ParseOrderedJsonOrDiscarded(text.substr(body, close - body));
    ToolCall call;
    if (ParseCall(value, "arguments", &call)) {
      reply.calls.push_back(std::move(call));
    } else {
      reply.content += text.substr(open, end - open);  // Not a call: text after all.
    }
    at = end;
  }
  reply.content = std::string(absl::StripAsciiWhitespace(reply.content));
  reply.content_null = reply.content.empty() && !reply.calls.empty();
  return reply;
}

// The length of the JSON object that opens text (text[0] == '{'), braces
// inside strings skipped; npos when it does not close.
size_t JsonObjectLength(absl::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}' && --depth == 0) {
      return i + 1;
    }
  }
  return absl::string_view::npos;
}

// Llama 3.1's calls: after an optional <|python_tag|>, one JSON object
// {"name", "parameters"} or several separated by ';' (as vLLM's llama3_json
// reads them; a ';' inside a string is the string's, a last ';' ends the
// calls). Anything else, or text after the calls, is content.
ToolCallsReply ParseLlama3Json(const std::string& text) {
  ToolCallsReply plain{text, false, {}};
  absl::string_view rest = absl::StripAsciiWhitespace(text);
  if (absl::ConsumePrefix(&rest, kPythonTag)) rest = absl::StripLeadingAsciiWhitespace(rest);
  ToolCallsReply reply{"", true, {}};
  while (true) {
    if (rest.empty() || rest[0] != '{') return plain;
    const size_t length = JsonObjectLength(rest);
    if (length == absl::string_view::npos) return plain;
    ToolCall call;
    if (!ParseCall(ParseOrderedJsonOrDiscarded(rest.substr(0, length)), "parameters", &call)) {
      return plain;
    }
    reply.calls.push_back(std::move(call));
    rest = absl::StripLeadingAsciiWhitespace(rest.substr(length));
    if (absl::ConsumePrefix(&rest, ";")) {
      rest = absl::StripLeadingAsciiWhitespace(rest);
    } else if (!rest.empty()) {
      return plain;
    }
    if (rest.empty()) return reply;
  }
}

}  // namespace

absl::StatusOr<ToolCallParser> ParseToolCallParserName(const std::string& name) {
  if (name.empty()) return ToolCallParser::kNone;
  if (name == "hermes") return ToolCallParser::kHermes;
  if (name == "llama3_json") return ToolCallParser::kLlama3Json;
  return absl::InvalidArgumentError(
      absl::StrCat("--tool-call-parser ", name, ": must be hermes or llama3_json"));
}

absl::Status ParseToolList(const json& body, const ordered_json* ordered, ordered_json* tools,
                           std::vector<std::string>* names) {
  *tools = nullptr;
  if (!body.contains("tools") || body["tools"].is_null()) return absl::OkStatus();
  if (!body["tools"].is_array()) return InvalidField("tools", "must be an array of tools");
  if (body["tools"].size() > static_cast<size_t>(kMaxTools)) {
    return InvalidField("tools", absl::StrCat("at most ", kMaxTools, " tools"));
  }
  if (body["tools"].empty()) return absl::OkStatus();
  *tools = ordered != nullptr && ordered->contains("tools") ? (*ordered)["tools"]
                                                            : ordered_json(body["tools"]);
  for (size_t i = 0; i < tools->size(); ++i) {
    if (absl::Status s = CheckTool((*tools)[i], i, names); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ParseTools(const json& body, const ordered_json* ordered, ToolCallParser parser,
                        ToolsRequest* out) {
  std::vector<std::string> names;
  if (absl::Status s = ParseToolList(body, ordered, &out->tools, &names); !s.ok()) return s;
  if (out->tools.is_null()) {
    if (body.contains("tool_choice") && !body["tool_choice"].is_null() &&
        body["tool_choice"] != "none" && body["tool_choice"] != "auto") {
      return InvalidField("tool_choice", "needs tools");
    }
    return absl::OkStatus();
  }
  if (absl::Status s = ParseChoice(body, names, out); !s.ok()) return s;
  if (body.contains("parallel_tool_calls") && !body["parallel_tool_calls"].is_null()) {
    if (!body["parallel_tool_calls"].is_boolean()) {
      return InvalidField("parallel_tool_calls", "must be a boolean");
    }
    out->parallel = body["parallel_tool_calls"].get<bool>();
  }
  if (out->choice == ToolChoice::kAuto && parser == ToolCallParser::kNone) {
    return InvalidField("tool_choice",
                        "\"auto\" (the default with tools) needs the server started with "
                        "--tool-call-parser hermes or llama3_json; or use \"required\", a named "
                        "function or \"none\"");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ToolCallSchema(const ToolsRequest& tools) {
  if (tools.choice == ToolChoice::kNamed) {
    for (const ordered_json& tool : tools.tools) {
      if (tool["function"]["name"] == tools.named) return ParametersOf(tool).dump();
    }
    return InvalidField("tool_choice.function.name", "is not among the tools");
  }
  ordered_json defs = ordered_json::object();
  ordered_json calls = ordered_json::array();
  for (const ordered_json& tool : tools.tools) {
    const std::string name = tool["function"]["name"].get<std::string>();
    ordered_json parameters = ParametersOf(tool);
    for (const char* key : {"$defs", "definitions"}) {
      if (!parameters.contains(key)) continue;
      for (auto& [def_name, def] : parameters[key].items()) {
        ordered_json moved = def;
        if (absl::Status s = Rehome(moved, name); !s.ok()) return s;
        defs[absl::StrCat(name, "__", def_name)] = std::move(moved);
      }
      parameters.erase(key);
    }
    if (absl::Status s = Rehome(parameters, name); !s.ok()) return s;
    calls.push_back({{"type", "object"},
                     {"properties", {{"name", {{"const", name}}}, {"parameters", parameters}}},
                     {"required", {"name", "parameters"}},
                     {"additionalProperties", false}});
  }
  ordered_json schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", calls}}}};
  if (!tools.parallel) schema["maxItems"] = 1;
  if (!defs.empty()) schema["$defs"] = std::move(defs);
  return schema.dump();
}

ToolCallsReply ExtractToolCalls(const ToolsRequest& tools, ToolCallParser parser,
                                const std::string& text) {
  switch (tools.choice) {
    case ToolChoice::kNone:
      return ToolCallsReply{text, false, {}};
    case ToolChoice::kNamed:
      return ToolCallsReply{"", true, {ToolCall{tools.named, text}}};
    case ToolChoice::kRequired: {
      const ordered_json value = ParseOrderedJsonOrDiscarded(text);
      ToolCallsReply reply{"", true, {}};
      if (!value.is_array()) return ToolCallsReply{text, false, {}};
      for (const ordered_json& item : value) {
        ToolCall call;
        if (!ParseCall(item, "parameters", &call)) return ToolCallsReply{text, false, {}};
        reply.calls.push_back(std::move(call));
      }
      return reply;
    }
    case ToolChoice::kAuto:
      if (parser == ToolCallParser::kHermes) return ParseHermes(text);
      if (parser == ToolCallParser::kLlama3Json) return ParseLlama3Json(text);
      return ToolCallsReply{text, false, {}};
  }
  return ToolCallsReply{text, false, {}};
}

json ToolCallsJson(const std::vector<ToolCall>& calls, const std::string& id_prefix, bool indexed) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json call = {{"id", absl::StrCat("call_", id_prefix, "_", i)},
                 {"type", "function"},
                 {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (indexed) call["index"] = i;
    out.push_back(std::move(call));
  }
  return out;
}

json ToolCallStream::Feed(const std::string& text) {
  auto content = [](const std::string& piece) {
    return piece.empty() ? json() : json({{"content", piece}});
  };
  switch (tools_->choice) {
    case ToolChoice::kNone:
      return content(text);
    case ToolChoice::kNamed: {
      if (text.empty()) return json();
      json entry = {{"index", 0}, {"function", {{"arguments", text}}}};
      if (!named_started_) {
        entry["id"] = absl::StrCat("call_", id_prefix_, "_0");
        entry["type"] = "function";
        entry["function"]["name"] = tools_->named;
        named_started_ = true;
      }
      return {{"tool_calls", json::array({entry})}};
    }
    case ToolChoice::kRequired:
      held_ += text;
      return json();
    case ToolChoice::kAuto:
      break;
  }
  held_ += text;
  if (capturing_) return json();
  if (parser_ == ToolCallParser::kLlama3Json && !plain_) {
    // The first non-blank text decides: a JSON object (or the python tag)
    // is a call, held to the end; anything else is content.
    const absl::string_view start = absl::StripLeadingAsciiWhitespace(held_);
    const absl::string_view tag = kPythonTag;
    if (start.empty()) return json();
    if (start[0] == '{' || start.substr(0, tag.size()) == tag) {
      capturing_ = true;
      return json();
    }
    if (tag.substr(0, start.size()) == start) return json();  // Maybe the tag, in pieces.
    plain_ = true;
  }
  if (parser_ == ToolCallParser::kHermes) {
    const size_t open = held_.find(kHermesOpen);
    if (open != std::string::npos) {
      capturing_ = true;
      std::string before = held_.substr(0, open);
      held_ = held_.substr(open);
      return content(before);
    }
    // Hold back what could still become "<tool_call>".
    size_t keep = std::min(held_.size(), std::string(kHermesOpen).size() - 1);
    while (keep > 0 && std::string(kHermesOpen).compare(0, keep, held_, held_.size() - keep, keep) != 0) {
      --keep;
    }
    std::string out = held_.substr(0, held_.size() - keep);
    held_ = held_.substr(held_.size() - keep);
    return content(out);
  }
  return content(std::exchange(held_, std::string()));
}

json ToolCallStream::Finish(bool* made_calls) {
  *made_calls = named_started_;
  const bool reads_calls = tools_->choice == ToolChoice::kRequired ||
                           (tools_->choice == ToolChoice::kAuto && capturing_);
  if (!reads_calls) {
    if (held_.empty()) return json();
    return {{"content", std::exchange(held_, std::string())}};
  }
  const ToolCallsReply reply = ExtractToolCalls(*tools_, parser_, std::exchange(held_, std::string()));
  json delta = json::object();
  if (!reply.content.empty()) delta["content"] = reply.content;
  if (!reply.calls.empty()) {
    delta["tool_calls"] = ToolCallsJson(reply.calls, id_prefix_, /*indexed=*/true);
    *made_calls = true;
  }
  return delta.empty() ? json() : delta;
}

}  // namespace pagoda::scheduler
