#include "scheduler/constraints/json_schema.h"

#include <random>
#include <string>

#include "gtest/gtest.h"
#include "scheduler/constraints/matcher.h"
#include "tests/constraints/mask_check.h"

namespace pagoda::constraints {
namespace {

using json = nlohmann::ordered_json;

std::shared_ptr<const TokenVocabulary> JsonVocabulary() {
  std::vector<std::optional<std::string>> tokens = {std::nullopt};
  for (int b = 0x20; b < 0x7F; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
  for (const char* piece : {"\n", "{\"", "\":", "\",", "\"}", "\"]", "},", "}]", "]}", "true",
                            "false", "null", ", \"", ": ", "\n  ", "12", "-1", "0.5", "\\u00e9",
                            "\\n", "\xC3\xA9", "a\"", "1,", "1}", "e+"}) {
    tokens.push_back(std::string(piece));
  }
  const int size = static_cast<int>(tokens.size());
  return *TokenVocabulary::Create(std::move(tokens), size);
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Compile(const std::string& schema) {
  GrammarBuilder g;
  absl::Status status = BuildJsonSchemaGrammar(json::parse(schema), JsonGrammarOptions{}, g);
  if (!status.ok()) return status;
  return CompiledGrammar::Create(g, JsonVocabulary());
}

bool Accepts(const CompiledGrammar& grammar, const std::string& text) {
  Matcher matcher(std::shared_ptr<const CompiledGrammar>(&grammar, [](const CompiledGrammar*) {}));
  return matcher.AcceptBytes(text) && matcher.CanEnd();
}

TEST(JsonSchemaTest, ObjectsFollowPropertiesAndRequired) {
  auto grammar = Compile(R"({"type": "object", "properties": {"a": {"type": "integer"},
      "b": {"type": "string", "maxLength": 2}, "c": {"type": "boolean"}}, "required": ["b"]})");
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  EXPECT_TRUE(Accepts(**grammar, R"({"b":"x"})"));
  EXPECT_TRUE(Accepts(**grammar, R"({"a": -12, "b": "xy", "c": true})"));
  EXPECT_TRUE(Accepts(**grammar, "{\n  \"b\": \"\",\n  \"c\": false\n}"));
  EXPECT_FALSE(Accepts(**grammar, R"({"a":1})"));           // b is required.
  EXPECT_FALSE(Accepts(**grammar, R"({"b":"xyz"})"));       // maxLength.
  EXPECT_FALSE(Accepts(**grammar, R"({"b":"x","d":1})"));   // No other property.
  EXPECT_FALSE(Accepts(**grammar, R"({"b":"x",})"));
  EXPECT_FALSE(Accepts(**grammar, R"({"c":true,"b":"x"})"));  // Schema order.
}

TEST(JsonSchemaTest, NumbersStayInTheirRanges) {
  auto integer = Compile(R"({"type": "integer", "minimum": -15, "exclusiveMaximum": 120})");
  ASSERT_TRUE(integer.ok()) << integer.status();
  for (int v = -30; v <= 150; ++v) {
    EXPECT_EQ(Accepts(**integer, std::to_string(v)), v >= -15 && v < 120) << v;
  }
  EXPECT_FALSE(Accepts(**integer, "007"));
  EXPECT_FALSE(Accepts(**integer, "-0"));
  auto number = Compile(R"({"type": "number", "minimum": -1.5, "maximum": 2})");
  ASSERT_TRUE(number.ok()) << number.status();
  EXPECT_TRUE(Accepts(**number, "1.999"));
  EXPECT_TRUE(Accepts(**number, "2.000"));
  EXPECT_TRUE(Accepts(**number, "-0.75"));
  EXPECT_FALSE(Accepts(**number, "2.001"));
  EXPECT_FALSE(Accepts(**number, "-1.5"));  // Fractional ends are rounded inward.
  EXPECT_FALSE(Accepts(**number, "1e2"));
}

TEST(JsonSchemaTest, RefusesWhatItCannotEnforce) {
  for (const char* schema : {
           R"({"type": "array", "uniqueItems": true})",
           R"({"type": "integer", "multipleOf": 3})",
           R"({"type": "object", "patternProperties": {"^a": {}}})",
           R"({"not": {"type": "string"}})",
           R"({"if": {}, "then": {}})",
           R"({"$ref": "http://example.com/schema"})",
           R"({"$ref": "#/$defs/missing"})",
           R"({"allOf": [{"type": "string"}, {"maxLength": 3}]})",
           R"({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]})",
           R"j({"type": "string", "pattern": "a(?=b)"})j",
           R"({"type": "string", "format": "iri"})",
           R"({"type": "string", "pattern": "a+", "maxLength": 3})",
           R"({"type": "object", "properties": {}, "required": ["x"], "additionalProperties": false})",
           R"({"type": "integer", "minimum": 5, "maximum": 4})",
           R"({"type": "array", "items": [{"type": "string"}]})",
           R"({"enum": [1, 2], "maxLength": 3})",
           R"({"type": "strange"})",
           R"(false)",
       }) {
    SCOPED_TRACE(schema);
    EXPECT_FALSE(Compile(schema).ok());
  }
  auto refused = Compile(R"({"type": "object", "properties": {"a": {"uniqueItems": true}}})");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("/properties/a"), std::string::npos);
  EXPECT_NE(refused.status().message().find("uniqueItems"), std::string::npos);
}

TEST(JsonSchemaTest, RecursiveReferences) {
  auto grammar = Compile(R"({"type": "object", "properties": {"v": {"type": "integer"},
      "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}, "required": ["v", "next"]})");
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  EXPECT_TRUE(Accepts(**grammar, R"({"v":1,"next":{"v":2,"next":{"v":3,"next":null}}})"));
  EXPECT_FALSE(Accepts(**grammar, R"({"v":1,"next":{"v":2}})"));
}

TEST(JsonSchemaTest, MasksEqualBruteForce) {
  std::mt19937_64 rng(3);
  for (const char* schema : {
           R"({"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "number"},
               "tags": {"type": "array", "items": {"enum": ["a", "b"]}}}, "required": ["name"]})",
           R"({"anyOf": [{"type": "integer"}, {"type": "array", "items": {"$ref": "#"}}]})",
           R"({})",
       }) {
    SCOPED_TRACE(schema);
    auto grammar = Compile(schema);
    ASSERT_TRUE(grammar.ok()) << grammar.status();
    for (int walk = 0; walk < 10; ++walk) testing::RandomWalk(Matcher(*grammar), rng, 40);
  }
}

TEST(JsonSchemaTest, JsonObjectGrammar) {
  GrammarBuilder g;
  BuildJsonObjectGrammar(JsonGrammarOptions{}, g);
  auto grammar = CompiledGrammar::Create(g, JsonVocabulary());
  ASSERT_TRUE(grammar.ok());
  EXPECT_TRUE(Accepts(**grammar, R"({"a": [1, {"b": null}, "x\n"], "c": -1.5e+3})"));
  EXPECT_FALSE(Accepts(**grammar, R"([1])"));
  EXPECT_FALSE(Accepts(**grammar, R"({"a": 01})"));
}

}  // namespace
}  // namespace pagoda::constraints
