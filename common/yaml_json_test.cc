#include "common/yaml_json.h"

#include <string>

#include "gtest/gtest.h"

namespace pagoda {
namespace {

using YamlValue = nlohmann::ordered_json;

YamlValue ParsedYaml(const std::string& text) {
  absl::StatusOr<YamlValue> parsed = ParseYamlDocument(text);
  EXPECT_TRUE(parsed.ok()) << text << ": " << parsed.status();
  return parsed.ok() ? *parsed : YamlValue("unparsed");
}

std::string YamlRefusal(const std::string& text) {
  absl::StatusOr<YamlValue> parsed = ParseYamlDocument(text);
  EXPECT_FALSE(parsed.ok()) << text << " gave " << parsed->dump();
  return std::string(parsed.status().message());
}

// Each plain scalar as PyYAML 6's safe_load types it (yaml.safe_load(text)
// printed with json.dumps gives the right-hand side).
TEST(YamlJsonTest, PlainScalarsAreTypedAsPyYamlTypesThem) {
  const struct {
    const char* yaml;
    YamlValue json;
  } cases[] = {
      {"true", true},
      {"Yes", true},
      {"ON", true},
      {"off", false},
      {"No", false},
      {"FALSE", false},
      {"tRUE", "tRUE"},
      {"y", "y"},
      {"8000", 8000},
      {"-12", -12},
      {"+7", 7},
      {"1_000", 1000},
      {"0", 0},
      {"010", 8},
      {"0x1F", 31},
      {"0b101", 5},
      {"1:30", 90},
      {"0.9", 0.9},
      {"-.5", "-.5"},
      {".5", 0.5},
      {"1.", 1.0},
      {"1.5e+3", 1500.0},
      {"1e3", "1e3"},
      {"1.0e5", "1.0e5"},
      {"1:30.5", 90.5},
      {"~", nullptr},
      {"null", nullptr},
      {"NULL", nullptr},
      {"nil", "nil"},
      {"0.9g", "0.9g"},
      {"2001-12-14", "2001-12-14"},
      {"9223372036854775807", int64_t{9223372036854775807}},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(ParsedYaml(std::string("v: ") + c.yaml)["v"], c.json) << c.yaml;
  }
  // A plain scalar over 1 KiB is text (a regex over 100,000 digits would
  // overflow the stack).
  const std::string digits(200000, '7');
  EXPECT_EQ(ParsedYaml("v: " + digits)["v"], digits);
  // Quoted scalars are strings; an empty value is null.
  EXPECT_EQ(ParsedYaml("a: 'true'\nb: \"8000\"\nc:\n"),
            YamlValue::parse(R"({"a": "true", "b": "8000", "c": null})"));
}

TEST(YamlJsonTest, TagsCollectionsAndOrder) {
  EXPECT_EQ(ParsedYaml("a: !!str 8000\nb: !!float 1\nc: !!int '12'\nd: !!bool yes\ne: !!null x\n"),
            YamlValue::parse(R"({"a": "8000", "b": 1.0, "c": 12, "d": true, "e": null})"));
  const YamlValue nested = ParsedYaml(
      "zeta: 1\n"
      "alpha:\n  method: ngram\n  list: [1, two, {k: v}]\n"
      "block:\n  - x\n  - 2\n");
  EXPECT_EQ(nested.dump(),
            R"({"zeta":1,"alpha":{"method":"ngram","list":[1,"two",{"k":"v"}]},"block":["x",2]})");
  // A repeated key keeps its first place and takes its last value (a dict).
  EXPECT_EQ(ParsedYaml("a: 1\nb: 2\na: 3\n").dump(), R"({"a":3,"b":2})");
  EXPECT_EQ(ParsedYaml(""), YamlValue(nullptr));
  EXPECT_EQ(ParsedYaml("# only a comment\n"), YamlValue(nullptr));
  EXPECT_EQ(ParsedYaml("--- [1, 2]\n...\n"), YamlValue::parse("[1, 2]"));
}

TEST(YamlJsonTest, RefusesWhatItDoesNotReadNamingTheLine) {
  EXPECT_EQ(YamlRefusal("a: 1\n---\nb: 2\n"), "line 2: a second document");
  EXPECT_EQ(YamlRefusal("a: &x 1\nb: *x\n"),
            "line 2: aliases (*NAME) are not read: write the value out");
  EXPECT_EQ(YamlRefusal("a: !!python/object:os.system x\n"),
            "line 1: tag tag:yaml.org,2002:python/object:os.system is not read (only !!str, "
            "!!int, !!float, !!bool, !!null, !!map, !!seq)");
  EXPECT_EQ(YamlRefusal("a: !!int 1.5\n"),
            "line 1: '1.5' is not a YAML int (or is beyond 64 bits)");
  EXPECT_EQ(YamlRefusal("a: 9223372036854775808\n"),
            "line 1: '9223372036854775808' is not a YAML int (or is beyond 64 bits)");
  EXPECT_EQ(YamlRefusal("a: .inf\n"), "line 1: '.inf': JSON has no infinity or NaN");
  EXPECT_EQ(YamlRefusal("? [1, 2]\n: x\n"), "line 1: a key that is not a scalar");
  EXPECT_EQ(YamlRefusal("a: [1, 2\n"), "line 2: did not find expected ',' or ']'");
  EXPECT_EQ(YamlRefusal("a: b: c\n"), "line 1: mapping values are not allowed in this context");
  std::string deep;
  for (int i = 0; i < 70; ++i) deep += "[";
  EXPECT_EQ(YamlRefusal(deep), "line 1: nested deeper than 64");
  EXPECT_EQ(YamlRefusal(std::string("a: \xff\n")), "line 1: invalid leading UTF-8 octet");
}

}  // namespace
}  // namespace pagoda
