#include <string>

#include "absl/strings/str_cat.h"
#include "scheduler/api/field_error.h"
#include "scheduler/api/openai_body_parts.h"

namespace pagoda::scheduler::openai_body {
namespace {

// The value at `key` of `ordered` (the body parsed keeping key order), or
// null.
const nlohmann::ordered_json* OrderedChild(const nlohmann::ordered_json* ordered, const char* key) {
  if (ordered == nullptr || !ordered->is_object() || !ordered->contains(key)) return nullptr;
  return &(*ordered)[key];
}

// A schema's text: from the order-keeping parse when there is one, so that
// properties are written in the order the client gave them.
std::string SchemaText(const json& schema, const nlohmann::ordered_json* ordered) {
  if (ordered != nullptr)
    return ordered->is_string() ? ordered->get<std::string>() : ordered->dump();
  return schema.is_string() ? schema.get<std::string>() : schema.dump();
}

// OpenAI's response_format: text, json_object, or json_schema {name,
// schema, strict, description}.
absl::Status ParseResponseFormat(const json& body, const nlohmann::ordered_json* ordered,
                                 pagoda::v1::GenerateRequest* out) {
  const json& format = body["response_format"];
  if (!format.is_object() || !format.contains("type") || !format["type"].is_string()) {
    return InvalidField("response_format", "must be an object with a string type");
  }
  const std::string type = format["type"].get<std::string>();
  if (type == "text") return absl::OkStatus();
  if (type == "json_object") {
    out->set_json_object(true);
    return absl::OkStatus();
  }
  if (type != "json_schema") {
    return InvalidField("response_format.type", "must be text, json_object or json_schema");
  }
  if (!format.contains("json_schema") || !format["json_schema"].is_object()) {
    return InvalidField("response_format.json_schema", "required: an object with a schema");
  }
  const json& spec = format["json_schema"];
  if (!spec.contains("schema") || !(spec["schema"].is_object() || spec["schema"].is_boolean())) {
    return InvalidField("response_format.json_schema.schema", "required: a JSON Schema object");
  }
  const nlohmann::ordered_json* ordered_schema =
      OrderedChild(OrderedChild(OrderedChild(ordered, "response_format"), "json_schema"), "schema");
  out->set_json_schema(SchemaText(spec["schema"], ordered_schema));
  return absl::OkStatus();
}

// vLLM's structured_outputs: exactly one of json (a schema, as an object or
// its text), regex, choice, grammar and json_object, and
// disable_any_whitespace.
absl::Status ParseStructuredOutputs(const json& body, const nlohmann::ordered_json* ordered,
                                    pagoda::v1::GenerateRequest* out) {
  const json& spec = body["structured_outputs"];
  if (!spec.is_object()) return InvalidField("structured_outputs", "must be an object");
  int kinds = 0;
  for (const auto& [key, value] : spec.items()) {
    const std::string field = "structured_outputs." + key.substr(0, 64);
    if (value.is_null()) continue;
    if (key == "disable_any_whitespace") {
      if (!value.is_boolean()) return InvalidField(field, "must be a boolean");
      out->set_disable_any_whitespace(value.get<bool>());
    } else if (key == "json") {
      if (!value.is_object() && !value.is_boolean() && !value.is_string()) {
        return InvalidField(field, "must be a JSON Schema (an object, or its text)");
      }
      out->set_json_schema(
          SchemaText(value, OrderedChild(OrderedChild(ordered, "structured_outputs"), "json")));
      ++kinds;
    } else if (key == "regex" || key == "grammar") {
      if (!value.is_string()) return InvalidField(field, "must be a string");
      key == "regex" ? out->set_regex(value.get<std::string>())
                     : out->set_grammar(value.get<std::string>());
      ++kinds;
    } else if (key == "choice") {
      if (!value.is_array()) return InvalidField(field, "must be an array of strings");
      for (const json& choice : value) {
        if (!choice.is_string()) return InvalidField(field, "must be an array of strings");
        out->mutable_choice()->add_choices(choice.get<std::string>());
      }
      ++kinds;
    } else if (key == "json_object") {
      if (!value.is_boolean()) return InvalidField(field, "must be a boolean");
      if (value.get<bool>()) out->set_json_object(true), ++kinds;
    } else {
      return InvalidField(field,
                          "is not supported (json, regex, choice, grammar, json_object, "
                          "disable_any_whitespace)");
    }
  }
  if (kinds > 1) {
    return InvalidField("structured_outputs",
                        "set one of json, regex, choice, grammar, json_object");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseConstraint(const json& body, const nlohmann::ordered_json* ordered,
                             pagoda::v1::GenerateRequest* out) {
  if (Present(body, "response_format")) {
    if (absl::Status s = ParseResponseFormat(body, ordered, out); !s.ok()) return s;
  }
  if (!Present(body, "structured_outputs")) return absl::OkStatus();
  if (out->constraint_case() != pagoda::v1::GenerateRequest::CONSTRAINT_NOT_SET) {
    return InvalidField("structured_outputs", "cannot be combined with a JSON response_format");
  }
  return ParseStructuredOutputs(body, ordered, out);
}

}  // namespace pagoda::scheduler::openai_body
