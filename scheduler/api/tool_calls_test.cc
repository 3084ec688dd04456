#include "scheduler/api/tool_calls.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pagoda::scheduler {
namespace {

using nlohmann::json;
using ordered_json = nlohmann::ordered_json;

json Body(const std::string& tool_choice_json) {
  json body = json::parse(R"({"tools": [
      {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"$ref": "#/$defs/unit"}},
        "required": ["city"], "$defs": {"unit": {"enum": ["c", "f"]}}}}},
      {"type": "function", "function": {"name": "now"}}]})");
  if (!tool_choice_json.empty()) body["tool_choice"] = json::parse(tool_choice_json);
  return body;
}

TEST(ToolCallsTest, ParsesToolsAndChoices) {
  ToolsRequest tools;
  ASSERT_TRUE(ParseTools(Body(""), nullptr, ToolCallParser::kHermes, &tools).ok());
  EXPECT_EQ(tools.choice, ToolChoice::kAuto);
  EXPECT_EQ(tools.tools.size(), 2u);
  ToolsRequest named;
  ASSERT_TRUE(ParseTools(Body(R"({"type": "function", "function": {"name": "now"}})"), nullptr,
                         ToolCallParser::kNone, &named).ok());
  EXPECT_EQ(named.choice, ToolChoice::kNamed);
  EXPECT_EQ(named.named, "now");
  ToolsRequest ignored;
  auto refused = [&](const json& body, ToolCallParser parser, const std::string& field) {
    absl::Status status = ParseTools(body, nullptr, parser, &ignored);
    ASSERT_FALSE(status.ok()) << field;
    EXPECT_EQ(status.message().substr(0, field.size()), field) << status;
  };
  refused(Body(""), ToolCallParser::kNone, "tool_choice");  // auto needs a parser.
  refused(Body(R"({"type": "function", "function": {"name": "missing"}})"), ToolCallParser::kHermes,
          "tool_choice.function.name");
  refused(Body(R"("sometimes")"), ToolCallParser::kHermes, "tool_choice");
  json bad = Body(R"("required")");
  bad["tools"][1]["function"]["name"] = "get weather!";
  refused(bad, ToolCallParser::kHermes, "tools[1].function.name");
  bad = Body(R"("required")");
  bad["tools"][1]["function"]["name"] = "get_weather";
  refused(bad, ToolCallParser::kHermes, "tools[1].function.name");
  refused(json{{"tool_choice", "required"}}, ToolCallParser::kHermes, "tool_choice");
  // A "type" that is not a string is refused, not thrown (json::value threw).
  bad = Body(R"("required")");
  bad["tools"][0]["type"] = json::array({"function"});
  refused(bad, ToolCallParser::kHermes, "tools[0]");
  refused(Body(R"({"type": 5, "function": {"name": "now"}})"), ToolCallParser::kHermes,
          "tool_choice");
}

TEST(ToolCallsTest, RequiredSchemaHoistsDefinitions) {
  ToolsRequest tools;
  ASSERT_TRUE(ParseTools(Body(R"("required")"), nullptr, ToolCallParser::kNone, &tools).ok());
  tools.parallel = false;
  absl::StatusOr<std::string> schema = ToolCallSchema(tools);
  ASSERT_TRUE(schema.ok()) << schema.status();
  const json parsed = json::parse(*schema);
  EXPECT_EQ(parsed["maxItems"], 1);
  EXPECT_TRUE(parsed["$defs"].contains("get_weather__unit"));
  EXPECT_EQ(parsed["items"]["anyOf"][0]["properties"]["parameters"]["properties"]["unit"]["$ref"],
            "#/$defs/get_weather__unit");
  EXPECT_EQ(parsed["items"]["anyOf"][1]["properties"]["name"]["const"], "now");
}

TEST(ToolCallsTest, ExtractsCallsWithEachParser) {
  ToolsRequest tools;
  tools.choice = ToolChoice::kAuto;
  ToolCallsReply hermes = ExtractToolCalls(
      tools, ToolCallParser::kHermes,
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lima\"}}\n"
      "</tool_call>\n<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>");
  ASSERT_EQ(hermes.calls.size(), 2u);
  EXPECT_EQ(hermes.content, "Let me look.");
  EXPECT_EQ(hermes.calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(hermes.calls[0].arguments), json({{"city", "Lima"}}));
  ToolCallsReply broken = ExtractToolCalls(tools, ToolCallParser::kHermes, "<tool_call>{nope</tool_call>");
  EXPECT_TRUE(broken.calls.empty());
  EXPECT_EQ(broken.content, "<tool_call>{nope</tool_call>");
  ToolCallsReply llama = ExtractToolCalls(
      tools, ToolCallParser::kLlama3Json,
      "<|python_tag|>{\"name\": \"now\", \"parameters\": {}}; {\"name\": \"get_weather\", "
      "\"parameters\": {\"city\": \"Oslo\"}}");
  ASSERT_EQ(llama.calls.size(), 2u);
  EXPECT_TRUE(llama.content_null);
  EXPECT_EQ(llama.calls[1].name, "get_weather");
  EXPECT_TRUE(ExtractToolCalls(tools, ToolCallParser::kLlama3Json, "Hello {x}").calls.empty());
  tools.choice = ToolChoice::kRequired;
  ToolCallsReply required = ExtractToolCalls(
      tools, ToolCallParser::kNone, "[{\"name\": \"now\", \"parameters\": {}}]");
  ASSERT_EQ(required.calls.size(), 1u);
  EXPECT_EQ(required.calls[0].arguments, "{}");
  tools.choice = ToolChoice::kNamed;
  tools.named = "get_weather";
  ToolCallsReply named = ExtractToolCalls(tools, ToolCallParser::kNone, "{\"city\": \"Rome\"}");
  ASSERT_EQ(named.calls.size(), 1u);
  EXPECT_EQ(named.calls[0].arguments, "{\"city\": \"Rome\"}");
  const json array = ToolCallsJson(named.calls, "p", /*indexed=*/false);
  EXPECT_EQ(array[0]["id"], "call_p_0");
  EXPECT_EQ(array[0]["function"]["name"], "get_weather");
}

TEST(ToolCallsTest, StreamsHoldBackWhatMayBeACall) {
  ToolsRequest tools;
  tools.choice = ToolChoice::kAuto;
  ToolCallStream hermes(&tools, ToolCallParser::kHermes, "x");
  std::string content;
  for (const char* piece : {"Sure", " <tool", "_ca", "ll>{\"name\": \"now\", ", "\"arguments\": {}}",
                            "</tool_call>"}) {
    const json delta = hermes.Feed(piece);
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    EXPECT_FALSE(delta.contains("tool_calls"));
  }
  EXPECT_EQ(content, "Sure ");
  bool made = false;
  const json tail = hermes.Finish(&made);
  EXPECT_TRUE(made);
  ASSERT_EQ(tail["tool_calls"].size(), 1u);
  EXPECT_EQ(tail["tool_calls"][0]["index"], 0);
  EXPECT_EQ(tail["tool_calls"][0]["function"]["name"], "now");

  ToolCallStream plain(&tools, ToolCallParser::kHermes, "x");
  std::string text;
  for (const char* piece : {"a <", "b> c <tool_"}) {
    const json delta = plain.Feed(piece);
    if (delta.contains("content")) text += delta["content"].get<std::string>();
  }
  const json rest = plain.Finish(&made);
  text += rest.value("content", "");
  EXPECT_FALSE(made);
  EXPECT_EQ(text, "a <b> c <tool_");

  tools.choice = ToolChoice::kNamed;
  tools.named = "now";
  ToolCallStream named(&tools, ToolCallParser::kNone, "y");
  const json first = named.Feed("{\"a\"");
  EXPECT_EQ(first["tool_calls"][0]["id"], "call_y_0");
  EXPECT_EQ(first["tool_calls"][0]["function"]["name"], "now");
  const json second = named.Feed(": 1}");
  EXPECT_FALSE(second["tool_calls"][0].contains("id"));
  EXPECT_EQ(second["tool_calls"][0]["function"]["arguments"], ": 1}");
}

// What a Llama 3.1 model emits for a call under its chat template (the shape
// the template renders a past call in), with the <|python_tag|> it may lead
// with, several calls joined by ';' (vLLM's llama3_json reads them), and the
// replies that are content after all.
TEST(ToolCallsTest, Llama3JsonReadsLlama31Replies) {
  ToolsRequest tools;
  tools.choice = ToolChoice::kAuto;
  auto extract = [&](const std::string& text) {
    return ExtractToolCalls(tools, ToolCallParser::kLlama3Json, text);
  };
  const ToolCallsReply one =
      extract("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"c\"}}");
  ASSERT_EQ(one.calls.size(), 1u);
  EXPECT_TRUE(one.content_null);
  EXPECT_EQ(one.calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(one.calls[0].arguments), json({{"city", "Paris"}, {"unit", "c"}}));
  const ToolCallsReply tagged =
      extract("<|python_tag|>{\"name\": \"now\", \"parameters\": {}}\n");
  ASSERT_EQ(tagged.calls.size(), 1u);
  EXPECT_EQ(tagged.calls[0].name, "now");
  // ';' and '}' inside strings belong to them; a last ';' ends the calls.
  const ToolCallsReply several = extract(
      "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"a; b} \\\"c\\\"\"}};"
      " {\"name\": \"now\", \"parameters\": {}};");
  ASSERT_EQ(several.calls.size(), 2u);
  EXPECT_EQ(json::parse(several.calls[0].arguments), json({{"q", "a; b} \"c\""}}));
  EXPECT_EQ(several.calls[1].name, "now");
  for (const std::string text :
       {"The weather is fine.", "{\"name\": \"now\", \"parameters\": {}} and more text",
        "{\"name\": \"now\", \"parameters\": {", "{\"parameters\": {}}", "<|python_tag|>",
        "{\"name\": \"now\"}; oops", "{} ; {}"}) {
    const ToolCallsReply reply = extract(text);
    EXPECT_TRUE(reply.calls.empty()) << text;
    EXPECT_EQ(reply.content, text);
    EXPECT_FALSE(reply.content_null) << text;
  }

  // Streamed: the tag may arrive in pieces; the calls come whole at the end.
  ToolCallStream stream(&tools, ToolCallParser::kLlama3Json, "z");
  for (const char* piece : {" <|py", "thon_tag|>{\"name\": \"get_weather\", ",
                            "\"parameters\": {\"city\": \"Lima\"}}"}) {
    EXPECT_TRUE(stream.Feed(piece).is_null()) << piece;
  }
  bool made = false;
  const json tail = stream.Finish(&made);
  EXPECT_TRUE(made);
  ASSERT_EQ(tail["tool_calls"].size(), 1u);
  EXPECT_EQ(tail["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(tail["tool_calls"][0]["id"], "call_z_0");
}

}  // namespace
}  // namespace pagoda::scheduler
