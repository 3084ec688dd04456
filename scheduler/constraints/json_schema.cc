#include "scheduler/constraints/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace pagoda::constraints {
namespace {

using json = nlohmann::ordered_json;

// Keywords that change nothing a generated value must satisfy.
const std::set<std::string>& Annotations() {
  static const auto* const kSet = new std::set<std::string>{
      "title",    "description", "default",   "examples", "$schema", "$id",
      "$comment", "deprecated",  "readOnly", "writeOnly", "$defs",   "definitions"};
  return *kSet;
}

enum class Category { kObject, kArray, kString, kNumber, kOther };

// Every keyword this compiler implements, with the type it constrains.
const std::map<std::string, Category>& KnownKeywords() {
  static const auto* const kMap = new std::map<std::string, Category>{
      {"properties", Category::kObject}, {"required", Category::kObject},
      {"additionalProperties", Category::kObject}, {"items", Category::kArray},
      {"prefixItems", Category::kArray}, {"minItems", Category::kArray},
      {"maxItems", Category::kArray}, {"minLength", Category::kString},
      {"maxLength", Category::kString}, {"pattern", Category::kString},
      {"format", Category::kString}, {"minimum", Category::kNumber},
      {"maximum", Category::kNumber}, {"exclusiveMinimum", Category::kNumber},
      {"exclusiveMaximum", Category::kNumber}, {"type", Category::kOther},
      {"enum", Category::kOther}, {"const", Category::kOther}, {"anyOf", Category::kOther},
      {"oneOf", Category::kOther}, {"allOf", Category::kOther}, {"$ref", Category::kOther}};
  return *kMap;
}

// The JSON type names a value has ("integer" values are also "number").
std::set<std::string> KindsOfValue(const json& value) {
  if (value.is_object()) return {"object"};
  if (value.is_array()) return {"array"};
  if (value.is_string()) return {"string"};
  if (value.is_boolean()) return {"boolean"};
  if (value.is_null()) return {"null"};
  return {"number"};
}

const std::set<std::string>& AllKinds() {
  static const auto* const kSet =
      new std::set<std::string>{"object", "array", "string", "number", "boolean", "null"};
  return *kSet;
}

class JsonSchemaCompiler {
 public:
  JsonSchemaCompiler(const json& root, const JsonGrammarOptions& options, GrammarBuilder& g)
      : root_(root), options_(options), g_(g) {}

  absl::Status Build();

 private:
  static absl::Status Error(const std::string& path, const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat("at ", path.empty() ? "/" : path, ": ", what));
  }
  ExprId Ws() { return JsonWhitespace(g_, options_); }
  ExprId Separator() { return g_.Sequence({Ws(), g_.Byte(','), Ws()}); }
  ExprId AnyValue();
  ExprId AsRule(ExprId body, const std::string& name);
  bool Constrains(const json& schema, const std::string& except1, const std::string& except2) const;

  absl::StatusOr<ExprId> Schema(const json& schema, const std::string& path, int depth);
  absl::Status CheckKeywords(const json& schema, const std::string& path) const;
  absl::StatusOr<ExprId> Ref(const json& schema, const std::string& path, int depth);
  absl::StatusOr<const json*> Resolve(const std::string& ref, const std::string& path) const;
  absl::StatusOr<ExprId> Combinator(const json& schema, const std::string& path, int depth);
  absl::Status CheckDisjoint(const json& branches, const std::string& path) const;
  std::set<std::string> Kinds(const json& schema, int depth) const;
  bool Discriminated(const json& a, const json& b) const;
  absl::StatusOr<ExprId> Enum(const json& schema, const std::string& path);
  absl::StatusOr<ExprId> Typed(const json& schema, const std::string& path, int depth);
  absl::StatusOr<ExprId> OfType(const json& schema, const std::string& type,
                                const std::string& path, int depth);
  absl::StatusOr<ExprId> Object(const json& schema, const std::string& path, int depth);
  absl::StatusOr<ExprId> Properties(const json& schema, const std::string& path, int depth);
  absl::StatusOr<ExprId> Array(const json& schema, const std::string& path, int depth);
  absl::StatusOr<ExprId> ArrayElements(std::vector<ExprId> prefix, std::optional<ExprId> rest,
                                       int min_items, int max_items, const std::string& path);
  absl::StatusOr<ExprId> String(const json& schema, const std::string& path);
  absl::StatusOr<ExprId> Number(const json& schema, bool integer, const std::string& path);
  absl::StatusOr<int> Count(const json& schema, const char* key, int fallback,
                            const std::string& path) const;

  const json& root_;
  const JsonGrammarOptions options_;
  GrammarBuilder& g_;
  std::optional<JsonValueRules> value_rules_;
  absl::flat_hash_map<std::string, RuleId> ref_rules_;
};

ExprId JsonSchemaCompiler::AnyValue() {
  if (!value_rules_.has_value()) value_rules_ = AddJsonValueRules(g_, options_);
  return g_.Call(value_rules_->value);
}

ExprId JsonSchemaCompiler::AsRule(ExprId body, const std::string& name) {
  const RuleId rule = g_.NewRule(name);
  g_.SetBody(rule, body);
  return g_.Call(rule);
}

// Whether `schema` has a keyword that constrains values, other than the
// two named.
bool JsonSchemaCompiler::Constrains(const json& schema, const std::string& except1,
                                    const std::string& except2) const {
  for (const auto& [key, value] : schema.items()) {
    if (key != except1 && key != except2 && !Annotations().count(key)) return true;
  }
  return false;
}

absl::Status JsonSchemaCompiler::CheckKeywords(const json& schema, const std::string& path) const {
  for (const auto& [key, value] : schema.items()) {
    if (Annotations().count(key) || KnownKeywords().count(key)) continue;
    return Error(path, absl::StrCat("keyword \"", key.substr(0, 64), "\" is not supported"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ExprId> JsonSchemaCompiler::Schema(const json& schema, const std::string& path,
                                                  int depth) {
  if (depth > kMaxSchemaDepth) {
    return Error(path, absl::StrCat("schemas nest deeper than ", kMaxSchemaDepth));
  }
  if (schema.is_boolean()) {
    if (schema.get<bool>()) return AnyValue();
    return Error(path, "the schema false matches nothing");
  }
  if (!schema.is_object()) return Error(path, "a schema must be an object or a boolean");
  if (absl::Status s = CheckKeywords(schema, path); !s.ok()) return s;
  if (schema.contains("$ref")) return Ref(schema, path, depth);
  if (schema.contains("anyOf") || schema.contains("oneOf") || schema.contains("allOf")) {
    return Combinator(schema, path, depth);
  }
  if (schema.contains("enum") || schema.contains("const")) return Enum(schema, path);
  return Typed(schema, path, depth);
}

absl::StatusOr<const json*> JsonSchemaCompiler::Resolve(const std::string& ref,
                                                        const std::string& path) const {
  if (ref.empty() || ref[0] != '#') {
    return Error(path, absl::StrCat("$ref \"", ref.substr(0, 64),
                                    "\": only local references (#...) are supported"));
  }
  const json* at = &root_;
  if (ref.size() > 1) {
    if (ref[1] != '/') return Error(path, "$ref: only JSON pointers (#/...) are supported");
    for (absl::string_view raw : absl::StrSplit(ref.substr(2), '/')) {
      const std::string token = absl::StrReplaceAll(raw, {{"~1", "/"}, {"~0", "~"}});
      if (at->is_object() && at->contains(token)) {
        at = &(*at)[token];
      } else if (at->is_array() && !token.empty() &&
                 std::all_of(token.begin(), token.end(), ::isdigit) && token.size() < 9 &&
                 std::stoul(token) < at->size()) {
        at = &(*at)[std::stoul(token)];
      } else {
        return Error(path, absl::StrCat("$ref \"", ref.substr(0, 64), "\" points nowhere"));
      }
    }
  }
  return at;
}

absl::StatusOr<ExprId> JsonSchemaCompiler::Ref(const json& schema, const std::string& path,
                                               int depth) {
  if (!schema["$ref"].is_string()) return Error(path, "$ref must be a string");
  if (Constrains(schema, "$ref", "")) {
    return Error(path, "keywords beside $ref are not supported");
  }
  const std::string ref = schema["$ref"].get<std::string>();
  auto it = ref_rules_.find(ref);
  if (it != ref_rules_.end()) return g_.Call(it->second);
  absl::StatusOr<const json*> target = Resolve(ref, path);
  if (!target.ok()) return target.status();
  const RuleId rule = g_.NewRule(ref);
  ref_rules_.emplace(ref, rule);  // Before the body: the target may refer to itself.
  absl::StatusOr<ExprId> body = Schema(**target, ref.substr(1), depth + 1);
  if (!body.ok()) return body.status();
  g_.SetBody(rule, *body);
  return g_.Call(rule);
}

absl::StatusOr<ExprId> JsonSchemaCompiler::Combinator(const json& schema, const std::string& path,
                                                      int depth) {
  const char* key = schema.contains("anyOf") ? "anyOf" : schema.contains("oneOf") ? "oneOf" : "allOf";
  if (Constrains(schema, key, "")) {
    return Error(path, absl::StrCat("keywords beside ", key, " are not supported"));
  }
  const json& branches = schema[key];
  if (!branches.is_array() || branches.empty()) {
    return Error(path, absl::StrCat(key, " must be a non-empty array"));
  }
  if (std::string(key) == "allOf") {
    if (branches.size() != 1) return Error(path, "allOf of more than one schema is not supported");
    return Schema(branches[0], absl::StrCat(path, "/allOf/0"), depth + 1);
  }
  if (std::string(key) == "oneOf") {
    if (absl::Status s = CheckDisjoint(branches, path); !s.ok()) return s;
  }
  std::vector<ExprId> alternatives;
  for (size_t i = 0; i < branches.size(); ++i) {
    absl::StatusOr<ExprId> branch = Schema(branches[i], absl::StrCat(path, "/", key, "/", i), depth + 1);
    if (!branch.ok()) return branch.status();
    alternatives.push_back(*branch);
  }
  return g_.Choice(std::move(alternatives));
}

std::set<std::string> JsonSchemaCompiler::Kinds(const json& schema, int depth) const {
  if (!schema.is_object() || depth > kMaxSchemaDepth) return AllKinds();
  if (schema.contains("$ref") && schema["$ref"].is_string()) {
    absl::StatusOr<const json*> target = Resolve(schema["$ref"].get<std::string>(), "");
    return target.ok() ? Kinds(**target, depth + 1) : AllKinds();
  }
  if (schema.contains("const")) return KindsOfValue(schema["const"]);
  std::set<std::string> kinds;
  if (schema.contains("enum") && schema["enum"].is_array()) {
    for (const json& value : schema["enum"]) {
      for (const std::string& kind : KindsOfValue(value)) kinds.insert(kind);
    }
    return kinds;
  }
  for (const char* key : {"anyOf", "oneOf", "allOf"}) {
    if (!schema.contains(key) || !schema[key].is_array()) continue;
    for (const json& branch : schema[key]) {
      for (const std::string& kind : Kinds(branch, depth + 1)) kinds.insert(kind);
    }
    return kinds;
  }
  if (!schema.contains("type")) return AllKinds();
  const json& type = schema["type"];
  for (const json& t : type.is_array() ? type : json::array({type})) {
    if (!t.is_string()) continue;
    const std::string name = t.get<std::string>();
    kinds.insert(name == "integer" ? "number" : name);
  }
  return kinds;
}

// Whether two object schemas require one property whose const or enum
// values differ between them, so that no object matches both.
bool JsonSchemaCompiler::Discriminated(const json& a, const json& b) const {
  auto values = [&](const json& schema, const std::string& name) -> std::optional<std::set<std::string>> {
    if (!schema.is_object() || !schema.contains("required") || !schema["required"].is_array() ||
        std::find(schema["required"].begin(), schema["required"].end(), name) ==
            schema["required"].end() ||
        !schema.contains("properties") || !schema["properties"].contains(name)) {
      return std::nullopt;
    }
    const json& property = schema["properties"][name];
    if (!property.is_object()) return std::nullopt;
    if (property.contains("const")) return std::set<std::string>{property["const"].dump()};
    if (!property.contains("enum") || !property["enum"].is_array()) return std::nullopt;
    std::set<std::string> out;
    for (const json& v : property["enum"]) out.insert(v.dump());
    return out;
  };
  if (!a.is_object() || !a.contains("properties") || !a["properties"].is_object()) return false;
  for (const auto& [name, unused] : a["properties"].items()) {
    auto va = values(a, name), vb = values(b, name);
    if (!va.has_value() || !vb.has_value()) continue;
    bool overlap = false;
    for (const std::string& v : *va) overlap = overlap || vb->count(v);
    if (!overlap) return true;
  }
  return false;
}

absl::Status JsonSchemaCompiler::CheckDisjoint(const json& branches, const std::string& path) const {
  for (size_t i = 0; i < branches.size(); ++i) {
    for (size_t j = i + 1; j < branches.size(); ++j) {
      std::set<std::string> common;
      const std::set<std::string> a = Kinds(branches[i], 0), b = Kinds(branches[j], 0);
      std::set_intersection(a.begin(), a.end(), b.begin(), b.end(),
                            std::inserter(common, common.begin()));
      if (common.empty()) continue;
      if (common == std::set<std::string>{"object"} && Discriminated(branches[i], branches[j])) {
        continue;
      }
      return Error(path, absl::StrCat("oneOf branches ", i, " and ", j,
                                      " may both match a value (give them different types or "
                                      "a required property with different const values), which "
                                      "this server cannot rule out"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ExprId> JsonSchemaCompiler::Enum(const json& schema, const std::string& path) {
  if (Constrains(schema, schema.contains("enum") ? "enum" : "const", "type")) {
    return Error(path, "keywords beside enum or const (other than type) are not supported");
  }
  const json values = schema.contains("const") ? json::array({schema["const"]}) : schema["enum"];
  if (!values.is_array() || values.size() > kMaxSchemaCount) {
    return Error(path, absl::StrCat("enum must be an array of at most ", kMaxSchemaCount, " values"));
  }
  std::set<std::string> types = AllKinds();
  if (schema.contains("type")) types = Kinds(json::object({{"type", schema["type"]}}), 0);
  std::vector<ExprId> alternatives;
  for (const json& value : values) {
    const std::set<std::string> kinds = KindsOfValue(value);
    if (!types.count(*kinds.begin())) continue;
    if (schema.contains("type") && schema["type"] == "integer" && value.is_number_float() &&
        value.get<double>() != std::floor(value.get<double>())) {
      continue;
    }
    alternatives.push_back(g_.Literal(value.dump()));
  }
  if (alternatives.empty()) return Error(path, "no enum or const value has the schema's type");
  return g_.Choice(std::move(alternatives));
}

absl::StatusOr<ExprId> JsonSchemaCompiler::Typed(const json& schema, const std::string& path,
                                                 int depth) {
  std::vector<std::string> types;
  if (schema.contains("type")) {
    const json& type = schema["type"];
    for (const json& t : type.is_array() ? type : json::array({type})) {
      if (!t.is_string()) return Error(path, "type must be a string or an array of strings");
      types.push_back(t.get<std::string>());
    }
    if (types.empty()) return Error(path, "type must name at least one type");
  } else {
    // No type: the types the keywords constrain, else any value.
    std::set<Category> implied;
    for (const auto& [key, value] : schema.items()) {
      auto it = KnownKeywords().find(key);
      if (it != KnownKeywords().end() && it->second != Category::kOther) implied.insert(it->second);
    }
    if (implied.count(Category::kObject)) types.push_back("object");
    if (implied.count(Category::kArray)) types.push_back("array");
    if (implied.count(Category::kString)) types.push_back("string");
    if (implied.count(Category::kNumber)) types.push_back("number");
    if (types.empty()) return AnyValue();
  }
  std::vector<ExprId> alternatives;
  for (const std::string& type : types) {
    absl::StatusOr<ExprId> typed = OfType(schema, type, path, depth);
    if (!typed.ok()) return typed.status();
    alternatives.push_back(*typed);
  }
  return g_.Choice(std::move(alternatives));
}

absl::StatusOr<ExprId> JsonSchemaCompiler::OfType(const json& schema, const std::string& type,
                                                  const std::string& path, int depth) {
  if (type == "object") return Object(schema, path, depth);
  if (type == "array") return Array(schema, path, depth);
  if (type == "string") return String(schema, path);
  if (type == "integer") return Number(schema, /*integer=*/true, path);
  if (type == "number") return Number(schema, /*integer=*/false, path);
  if (type == "boolean") return g_.Choice({g_.Literal("true"), g_.Literal("false")});
  if (type == "null") return g_.Literal("null");
  return Error(path, absl::StrCat("unknown type \"", type.substr(0, 32), "\""));
}

absl::StatusOr<int> JsonSchemaCompiler::Count(const json& schema, const char* key, int fallback,
                                              const std::string& path) const {
  if (!schema.contains(key)) return fallback;
  const json& value = schema[key];
  if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
      value.get<int64_t>() > kMaxSchemaCount) {
    return Error(path, absl::StrCat(key, " must be an integer in [0, ", kMaxSchemaCount, "]"));
  }
  return static_cast<int>(value.get<int64_t>());
}

absl::StatusOr<ExprId> JsonSchemaCompiler::String(const json& schema, const std::string& path) {
  const bool lengths = schema.contains("minLength") || schema.contains("maxLength");
  if (schema.contains("format") + schema.contains("pattern") + lengths > 1) {
    return Error(path, "only one of format, pattern and minLength/maxLength is supported at once");
  }
  for (const char* key : {"format", "pattern"}) {
    if (schema.contains(key) && !schema[key].is_string()) {
      return Error(path, absl::StrCat(key, " must be a string"));
    }
  }
  absl::StatusOr<ExprId> out;
  if (schema.contains("format")) {
    out = JsonFormatString(g_, schema["format"].get<std::string>());
  } else if (schema.contains("pattern")) {
    out = JsonPatternString(g_, schema["pattern"].get<std::string>());
  } else {
    absl::StatusOr<int> min = Count(schema, "minLength", 0, path);
    if (!min.ok()) return min.status();
    absl::StatusOr<int> max = Count(schema, "maxLength", kUnbounded, path);
    if (!max.ok()) return max.status();
    if (*max != kUnbounded && *max < *min) return Error(path, "maxLength is below minLength");
    out = JsonString(g_, *min, *max);
  }
  if (!out.ok()) return Error(path, std::string(out.status().message()));
  return out;
}

absl::StatusOr<ExprId> JsonSchemaCompiler::Number(const json& schema, bool integer,
                                                  const std::string& path) {
  // Bounds as integers inside the range (json_schema.h says why).
  constexpr double kClamp = 1e16;
  std::optional<int64_t> lo, hi;
  auto tighten_low = [&](int64_t v) { lo = lo.has_value() ? std::max(*lo, v) : v; };
  auto tighten_high = [&](int64_t v) { hi = hi.has_value() ? std::min(*hi, v) : v; };
  for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
    if (!schema.contains(key)) continue;
    if (!schema[key].is_number()) return Error(path, absl::StrCat(key, " must be a number"));
    const double v = std::clamp(schema[key].get<double>(), -kClamp, kClamp);
    const std::string name = key;
    if (name == "minimum") tighten_low(static_cast<int64_t>(std::ceil(v)));
    if (name == "exclusiveMinimum") tighten_low(static_cast<int64_t>(std::floor(v)) + 1);
    if (name == "maximum") tighten_high(static_cast<int64_t>(std::floor(v)));
    if (name == "exclusiveMaximum") tighten_high(static_cast<int64_t>(std::ceil(v)) - 1);
  }
  absl::StatusOr<ExprId> out = integer ? JsonInteger(g_, lo, hi) : JsonNumber(g_, lo, hi);
  if (!out.ok()) return Error(path, std::string(out.status().message()));
  return out;
}

absl::StatusOr<ExprId> JsonSchemaCompiler::Object(const json& schema, const std::string& path,
                                                  int depth) {
  const bool has_properties = schema.contains("properties") || schema.contains("required");
  const json additional = schema.value("additionalProperties", json(true));
  if (has_properties) {
    absl::StatusOr<ExprId> members = Properties(schema, path, depth);
    if (!members.ok()) return members.status();
    return AsRule(g_.Sequence({g_.Byte('{'), Ws(), *members, Ws(), g_.Byte('}')}), path);
  }
  if (additional.is_boolean()) {
    if (!additional.get<bool>()) return g_.Sequence({g_.Byte('{'), Ws(), g_.Byte('}')});
    AnyValue();
    return g_.Call(value_rules_->object);
  }
  absl::StatusOr<ExprId> value = Schema(additional, path + "/additionalProperties", depth + 1);
  if (!value.ok()) return value.status();
  const ExprId member = g_.Sequence(
      {JsonString(g_, 0, kUnbounded), Ws(), g_.Byte(':'), Ws(), *value});
  return AsRule(g_.Sequence({g_.Byte('{'), Ws(),
                             g_.Optional(g_.Sequence(
                                 {member, g_.Star(g_.Sequence({Separator(), member}))})),
                             Ws(), g_.Byte('}')}),
                path);
}

absl::StatusOr<ExprId> JsonSchemaCompiler::Properties(const json& schema, const std::string& path,
                                                      int depth) {
  const json properties = schema.value("properties", json::object());
  const json required = schema.value("required", json::array());
  if (!properties.is_object() || properties.size() > kMaxSchemaProperties) {
    return Error(path, absl::StrCat("properties must be an object of at most ",
                                    kMaxSchemaProperties, " entries"));
  }
  if (!required.is_array()) return Error(path, "required must be an array of strings");
  std::vector<std::pair<std::string, const json*>> members;
  for (const auto& [name, subschema] : properties.items()) members.emplace_back(name, &subschema);
  const json additional = schema.value("additionalProperties", json(true));
  std::set<std::string> required_names;
  for (const json& name : required) {
    if (!name.is_string()) return Error(path, "required must be an array of strings");
    required_names.insert(name.get<std::string>());
    if (properties.contains(name.get<std::string>())) continue;
    // Required but not described: its schema is additionalProperties'.
    if (additional == json(false)) {
      return Error(path, absl::StrCat("required property \"", name.get<std::string>().substr(0, 64),
                                      "\" is not in properties and additionalProperties is false"));
    }
    static const json kTrue = true;
    members.emplace_back(name.get<std::string>(), schema.contains("additionalProperties")
                                                       ? &schema["additionalProperties"]
                                                       : &kTrue);
  }
  std::vector<ExprId> items;
  std::vector<bool> is_required;
  for (const auto& [name, subschema] : members) {
    absl::StatusOr<ExprId> value =
        Schema(*subschema, absl::StrCat(path, "/properties/", name), depth + 1);
    if (!value.ok()) return value.status();
    items.push_back(g_.Sequence({g_.Literal(json(name).dump()), Ws(), g_.Byte(':'), Ws(), *value}));
    is_required.push_back(required_names.count(name) > 0);
  }
  // after[i]: the members after i, each written with its separator.
  const int n = static_cast<int>(items.size());
  std::vector<ExprId> after(n + 1, g_.Empty());
  for (int i = n - 1; i >= 0; --i) {
    const ExprId item = g_.Sequence({Separator(), items[i]});
    after[i] = g_.Sequence({is_required[i] ? item : g_.Optional(item), after[i + 1]});
  }
  // The first member written is any up to the first required one.
  std::vector<ExprId> firsts;
  for (int i = 0; i < n; ++i) {
    firsts.push_back(g_.Sequence({items[i], after[i + 1]}));
    if (is_required[i]) break;
  }
  const bool all_optional = std::none_of(is_required.begin(), is_required.end(), [](bool r) { return r; });
  const ExprId body = g_.Choice(std::move(firsts));
  return all_optional ? g_.Optional(body) : body;
}

absl::StatusOr<ExprId> JsonSchemaCompiler::ArrayElements(std::vector<ExprId> prefix,
                                                         std::optional<ExprId> rest, int min_items,
                                                         int max_items, const std::string& path) {
  int k = static_cast<int>(prefix.size());
  if (!rest.has_value()) max_items = max_items == kUnbounded ? k : std::min(max_items, k);
  if (max_items != kUnbounded && max_items < min_items) {
    return Error(path, "no array length satisfies minItems, maxItems and items");
  }
  if (max_items != kUnbounded && k > max_items) k = max_items;
  const int rest_max = max_items == kUnbounded ? kUnbounded : max_items - k;
  if (k == 0) {
    if (max_items == 0) return g_.Empty();
    const ExprId list = g_.Sequence(
        {*rest, g_.Repeat(g_.Sequence({Separator(), *rest}), std::max(min_items - 1, 0),
                          rest_max == kUnbounded ? kUnbounded : rest_max - 1)});
    return min_items == 0 ? g_.Optional(list) : list;
  }
  ExprId list = rest.has_value()
                    ? g_.Repeat(g_.Sequence({Separator(), *rest}), std::max(0, min_items - k), rest_max)
                    : g_.Empty();
  for (int i = k - 1; i >= 0; --i) {
    list = g_.Sequence({i == 0 ? prefix[i] : g_.Sequence({Separator(), prefix[i]}), list});
    if (i >= min_items) list = g_.Optional(list);
  }
  return list;
}

absl::StatusOr<ExprId> JsonSchemaCompiler::Array(const json& schema, const std::string& path,
                                                 int depth) {
  absl::StatusOr<int> min_items = Count(schema, "minItems", 0, path);
  if (!min_items.ok()) return min_items.status();
  absl::StatusOr<int> max_items = Count(schema, "maxItems", kUnbounded, path);
  if (!max_items.ok()) return max_items.status();
  std::vector<ExprId> prefix;
  if (schema.contains("prefixItems")) {
    const json& items = schema["prefixItems"];
    if (!items.is_array() || items.size() > kMaxSchemaProperties) {
      return Error(path, "prefixItems must be an array of schemas");
    }
    for (size_t i = 0; i < items.size(); ++i) {
      absl::StatusOr<ExprId> item = Schema(items[i], absl::StrCat(path, "/prefixItems/", i), depth + 1);
      if (!item.ok()) return item.status();
      prefix.push_back(*item);
    }
  }
  std::optional<ExprId> rest;
  const json items = schema.value("items", json(true));
  if (items.is_array()) {
    return Error(path, "items as an array (draft 7 tuples) is not supported; use prefixItems");
  }
  if (items != json(false)) {
    absl::StatusOr<ExprId> item = Schema(items, path + "/items", depth + 1);
    if (!item.ok()) return item.status();
    // Copies of a bounded array share one rule instead of copying its automaton.
    rest = *max_items == kUnbounded && *min_items <= 1 ? *item : AsRule(*item, path + "/items");
  }
  absl::StatusOr<ExprId> elements = ArrayElements(std::move(prefix), rest, *min_items, *max_items, path);
  if (!elements.ok()) return elements.status();
  return AsRule(g_.Sequence({g_.Byte('['), Ws(), *elements, Ws(), g_.Byte(']')}), path);
}

absl::Status JsonSchemaCompiler::Build() {
  const RuleId root = g_.NewRule("root");
  g_.SetRoot(root);
  ref_rules_.emplace("#", root);
  absl::StatusOr<ExprId> body = Schema(root_, "", 0);
  if (!body.ok()) return body.status();
  g_.SetBody(root, *body);
  return absl::OkStatus();
}

}  // namespace

absl::Status BuildJsonSchemaGrammar(const json& schema, const JsonGrammarOptions& options,
                                    GrammarBuilder& g) {
  return JsonSchemaCompiler(schema, options, g).Build();
}

void BuildJsonObjectGrammar(const JsonGrammarOptions& options, GrammarBuilder& g) {
  const JsonValueRules rules = AddJsonValueRules(g, options);
  g.SetRoot(rules.object);
}

}  // namespace pagoda::constraints
