#include "scheduler/api/openai_protocol.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/sampling_limits.h"
#include "scheduler/api/field_error.h"
#include "scheduler/api/json_body.h"
#include "scheduler/engine/finish_reason.h"

namespace pagoda::scheduler {
namespace {

using nlohmann::json;

// Above this many prompt token ids or messages a body is refused before any
// work: the validator bounds the prompt again by max_model_len.
constexpr size_t kMaxPromptTokenIds = 1 << 20;
// The sampling fields' wire range here is what the proto's float holds: their
// meaning's range is the request validator's, the same for every front door
// (temperature 5 is accepted over HTTP as over gRPC, as vLLM does).
constexpr double kFloatMax = std::numeric_limits<float>::max();
constexpr size_t kMaxMessages = 4096;
constexpr size_t kMaxChatTemplateKwargs = 32;

bool Present(const json& body, const char* key) {
  return body.contains(key) && !body[key].is_null();
}

absl::StatusOr<double> Number(const json& body, const char* key, double fallback, double low,
                              double high) {
  if (!Present(body, key)) return fallback;
  if (!body[key].is_number()) return InvalidField(key, "must be a number");
  const double value = body[key].get<double>();
  if (!(value >= low && value <= high)) {
    return InvalidField(key, absl::StrCat("must be in [", low, ", ", high, "], got ", value));
  }
  return value;
}

absl::StatusOr<int64_t> Integer(const json& body, const char* key, int64_t fallback, int64_t low,
                                int64_t high) {
  if (!Present(body, key)) return fallback;
  if (!body[key].is_number_integer()) return InvalidField(key, "must be an integer");
  const int64_t value = body[key].get<int64_t>();
  if (value < low || value > high) {
    return InvalidField(key, absl::StrCat("must be in [", low, ", ", high, "], got ", value));
  }
  return value;
}

// A boolean field; absent or null gives `fallback`. (json::value with a
// bool default throws on a field of another type, or null, and an exception
// out of a route ends the server: every boolean is read through here.)
absl::StatusOr<bool> Boolean(const json& body, const char* key, bool fallback) {
  if (!Present(body, key)) return fallback;
  if (!body[key].is_boolean()) return InvalidField(key, "must be a boolean");
  return body[key].get<bool>();
}

// Most prompts in one completions body: each becomes an engine request.
constexpr size_t kMaxPrompts = 1024;

// One prompt: a string or an array of token ids.
absl::Status ParseOnePrompt(const json& prompt, pagoda::v1::GenerateRequest* out) {
  if (prompt.is_string()) {
    out->set_prompt(prompt.get<std::string>());
    return absl::OkStatus();
  }
  if (prompt.is_array() && !prompt.empty() && prompt.size() <= kMaxPromptTokenIds) {
    for (const json& id : prompt) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        return InvalidField("prompt", "must be a string or an array of token ids");
      }
      out->add_prompt_token_ids(id.get<int32_t>());
    }
    return absl::OkStatus();
  }
  return InvalidField(
      "prompt",
      "must be a string, an array of token ids, or a list of either (one choice per "
      "prompt)");
}

absl::Status ParsePrompts(const json& body, std::vector<pagoda::v1::GenerateRequest>* out) {
  if (!Present(body, "prompt")) return InvalidField("prompt", "required");
  const json& prompt = body["prompt"];
  // A list of prompts: strings, or arrays of token ids.
  if (prompt.is_array() && !prompt.empty() && (prompt[0].is_string() || prompt[0].is_array())) {
    if (prompt.size() > kMaxPrompts) {
      return InvalidField("prompt",
                          absl::StrCat("at most ", kMaxPrompts, " prompts in one request"));
    }
    for (const json& entry : prompt) {
      if (!entry.is_string() && !entry.is_array()) {
        return InvalidField("prompt", "a list of prompts must hold strings or arrays of token ids");
      }
      if (absl::Status status = ParseOnePrompt(entry, &out->emplace_back()); !status.ok()) {
        return status;
      }
    }
    return absl::OkStatus();
  }
  return ParseOnePrompt(prompt, &out->emplace_back());
}

// OpenAI's tool fields of a message (an assistant's tool_calls, a tool
// result's tool_call_id and name) kept for the chat template, in the
// client's key order, a call's arguments given as a JSON string handed to
// the template as the object it spells (as vLLM does).
absl::Status KeepToolFields(const json& message, const nlohmann::ordered_json* ordered,
                            const std::string& field, ChatMessage* parsed) {
  if (!message.contains("tool_calls") && !message.contains("tool_call_id")) return absl::OkStatus();
  nlohmann::ordered_json fields = ordered != nullptr ? *ordered : nlohmann::ordered_json(message);
  if (fields.contains("tool_calls")) {
    if (!fields["tool_calls"].is_array()) return InvalidField(field, "tool_calls must be an array");
    for (nlohmann::ordered_json& call : fields["tool_calls"]) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) {
        return InvalidField(field, "each tool call needs a function");
      }
      nlohmann::ordered_json& arguments = call["function"]["arguments"];
      if (arguments.is_string()) {
        nlohmann::ordered_json parsed_arguments =
            ParseOrderedJsonOrDiscarded(arguments.get<std::string>());
        if (parsed_arguments.is_object()) arguments = std::move(parsed_arguments);
      }
    }
  }
  // A null content stays "" (as for every message): templates such as
  // Qwen3's test `'</think>' in message.content`, which a null breaks.
  parsed->fields = std::move(fields);
  return absl::OkStatus();
}

// vLLM's chat_template_kwargs: an object of at most kMaxChatTemplateKwargs
// variables named as Jinja names (the template refuses the request's own:
// messages, tools, add_generation_prompt).
absl::Status ParseChatTemplateKwargs(const json& body, const nlohmann::ordered_json* ordered,
                                     nlohmann::ordered_json* out) {
  if (!Present(body, "chat_template_kwargs")) return absl::OkStatus();
  const json& kwargs = body["chat_template_kwargs"];
  if (!kwargs.is_object() || kwargs.size() > kMaxChatTemplateKwargs) {
    return InvalidField("chat_template_kwargs",
                        absl::StrCat("must be an object of at most ", kMaxChatTemplateKwargs,
                                     " variables"));
  }
  for (const auto& [name, value] : kwargs.items()) {
    const bool valid = !name.empty() && name.size() <= 64 &&
                       !absl::ascii_isdigit(static_cast<unsigned char>(name[0])) &&
                       std::all_of(name.begin(), name.end(), [](char c) {
                         return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
                       });
    if (!valid) {
      return InvalidField("chat_template_kwargs",
                          absl::StrCat("\"", name.substr(0, 64),
                                       "\" is not a variable name ([A-Za-z_][A-Za-z0-9_]{0,63})"));
    }
  }
  *out = ordered != nullptr && ordered->contains("chat_template_kwargs")
             ? (*ordered)["chat_template_kwargs"]
             : nlohmann::ordered_json(kwargs);
  return absl::OkStatus();
}

absl::Status ParseMessages(const json& body, const nlohmann::ordered_json* ordered,
                           OpenAiRequest* out) {
  if (!Present(body, "messages") || !body["messages"].is_array() || body["messages"].empty()) {
    return InvalidField("messages", "required: a non-empty array");
  }
  if (body["messages"].size() > kMaxMessages) {
    return InvalidField("messages", absl::StrCat("at most ", kMaxMessages));
  }
  for (size_t i = 0; i < body["messages"].size(); ++i) {
    const json& message = body["messages"][i];
    const std::string field = absl::StrCat("messages[", i, "]");
    if (!message.is_object() || !message.contains("role") || !message["role"].is_string()) {
      return InvalidField(field, "needs a string role");
    }
    ChatMessage parsed{message["role"].get<std::string>(), ""};
    const json content = message.value("content", json());
    if (content.is_string()) {
      parsed.content = content.get<std::string>();
    } else if (content.is_array()) {
      // Content parts: only text parts are understood.
      for (const json& part : content) {
        if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
            !part.contains("text") ||
            !part["text"].is_string()) {
          return InvalidField(field, "content parts must be {\"type\": \"text\", \"text\": ...}");
        }
        parsed.content += part["text"].get<std::string>();
      }
    } else if (!content.is_null()) {
      return InvalidField(field, "content must be a string or text parts");
    }
    const nlohmann::ordered_json* ordered_message =
        ordered != nullptr && ordered->contains("messages") && (*ordered)["messages"].size() > i
            ? &(*ordered)["messages"][i]
            : nullptr;
    if (absl::Status s = KeepToolFields(message, ordered_message, field, &parsed); !s.ok()) return s;
    out->messages.push_back(std::move(parsed));
  }
  return absl::OkStatus();
}

absl::Status ParseStop(const json& body, pagoda::v1::StoppingCriteria* stopping) {
  if (Present(body, "stop")) {
    const json& stop = body["stop"];
    if (stop.is_string()) {
      stopping->add_stop(stop.get<std::string>());
    } else if (stop.is_array()) {
      for (const json& entry : stop) {
        if (!entry.is_string())
          return InvalidField("stop", "must be a string or an array of strings");
        stopping->add_stop(entry.get<std::string>());
        if (stopping->stop_size() > 64) return InvalidField("stop", "too many stop strings");
      }
    } else {
      return InvalidField("stop", "must be a string or an array of strings");
    }
  }
  if (Present(body, "stop_token_ids")) {
    if (!body["stop_token_ids"].is_array() || body["stop_token_ids"].size() > 1024) {
      return InvalidField("stop_token_ids", "must be an array of at most 1024 token ids");
    }
    for (const json& id : body["stop_token_ids"]) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        return InvalidField("stop_token_ids", "must hold token ids");
      }
      stopping->add_stop_token_ids(id.get<int32_t>());
    }
  }
  return absl::OkStatus();
}

// Refuses options that would change the output in ways this server ignores.
absl::Status RefuseUnsupported(const json& body) {
  for (const char* key : {"functions", "function_call"}) {
    if (Present(body, key) && !(body[key].is_object() && body[key].empty()) &&
        !(body[key].is_array() && body[key].empty())) {
      return InvalidField(key, "is not supported");
    }
  }
  // vLLM's older names: refused by name rather than silently unconstrained.
  for (const char* key : {"guided_json", "guided_regex", "guided_choice", "guided_grammar",
                          "guided_decoding_backend", "guided_whitespace_pattern"}) {
    if (Present(body, key)) {
      return InvalidField(key, "is not supported; use structured_outputs (vLLM's current name)");
    }
  }
  // vLLM refuses it too: fill-in-the-middle needs the model's own format.
  if (Present(body, "suffix") && !(body["suffix"].is_string() && body["suffix"].empty())) {
    return InvalidField("suffix", "is not supported (no fill-in-the-middle); leave it out");
  }
  return absl::OkStatus();
}

// vLLM's beam search fields: use_beam_search, best_of (the width; without
// beam search only 1), length_penalty, early_stopping. Passed through as
// the gRPC fields; the validator bounds them and requires temperature 0.
// Returns whether the body asks for beam search.
absl::StatusOr<bool> ParseBeamSearch(const json& body, pagoda::v1::SamplingParams* sampling) {
  absl::StatusOr<bool> use_beam_search = Boolean(body, "use_beam_search", false);
  if (!use_beam_search.ok()) return use_beam_search.status();
  const bool beam = *use_beam_search;
  absl::StatusOr<int64_t> best_of = Integer(body, "best_of", 0, beam ? 0 : 1, beam ? 128 : 1);
  if (!best_of.ok()) {
    return beam ? best_of.status()
                : InvalidField("best_of", "is only supported with use_beam_search");
  }
  absl::StatusOr<bool> early_stopping = Boolean(body, "early_stopping", false);
  if (!early_stopping.ok()) return early_stopping.status();
  absl::StatusOr<double> length_penalty =
      Number(body, "length_penalty", 1.0, -kFloatMax, kFloatMax);
  if (!length_penalty.ok()) return length_penalty.status();
  if (!beam) return false;
  sampling->set_use_beam_search(true);
  sampling->set_best_of(static_cast<int32_t>(*best_of));
  sampling->set_length_penalty(static_cast<float>(*length_penalty));
  sampling->set_early_stopping(*early_stopping);
  return true;
}

// The value at `key` of `ordered` (the body parsed keeping key order), or
// null.
const nlohmann::ordered_json* OrderedChild(const nlohmann::ordered_json* ordered, const char* key) {
  if (ordered == nullptr || !ordered->is_object() || !ordered->contains(key)) return nullptr;
  return &(*ordered)[key];
}

// A schema's text: from the order-keeping parse when there is one, so that
// properties are written in the order the client gave them.
std::string SchemaText(const json& schema, const nlohmann::ordered_json* ordered) {
  if (ordered != nullptr) return ordered->is_string() ? ordered->get<std::string>() : ordered->dump();
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
      out->set_json_schema(SchemaText(value, OrderedChild(OrderedChild(ordered, "structured_outputs"), "json")));
      ++kinds;
    } else if (key == "regex" || key == "grammar") {
      if (!value.is_string()) return InvalidField(field, "must be a string");
      key == "regex" ? out->set_regex(value.get<std::string>()) : out->set_grammar(value.get<std::string>());
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

// tools, tool_choice, parallel_tool_calls (tool_calls.h); "required" and a
// named function become the request's JSON Schema constraint.
absl::Status ParseToolChoice(const json& body, const nlohmann::ordered_json* ordered,
                             OpenAiRequest* out) {
  if (!out->chat) {
    if (Present(body, "tools") || Present(body, "tool_choice")) {
      return InvalidField("tools", "only /v1/chat/completions takes tools");
    }
    return absl::OkStatus();
  }
  if (absl::Status s = ParseTools(body, ordered, out->tool_parser, &out->tools); !s.ok()) return s;
  if (out->tools.choice != ToolChoice::kRequired && out->tools.choice != ToolChoice::kNamed) {
    return absl::OkStatus();
  }
  if (out->generate.constraint_case() != pagoda::v1::GenerateRequest::CONSTRAINT_NOT_SET) {
    return InvalidField("tool_choice",
                        "\"required\" or a function cannot be combined with "
                        "response_format or structured_outputs");
  }
  absl::StatusOr<std::string> schema = ToolCallSchema(out->tools);
  if (!schema.ok()) return schema.status();
  out->generate.set_json_schema(*schema);
  return absl::OkStatus();
}

// logit_bias ({"token id": bias}, OpenAI's string keys), allowed_token_ids
// and bad_words (vLLM's extra parameters). Values are bounded again by the
// validator, which names the gRPC field.
absl::Status ParseTokenLists(const json& body, pagoda::v1::SamplingParams* sampling) {
  if (Present(body, "logit_bias")) {
    const json& bias = body["logit_bias"];
    if (!bias.is_object() || bias.size() > static_cast<size_t>(kMaxLogitBiasEntries)) {
      return InvalidField("logit_bias",
                          absl::StrCat("must be an object of at most ", kMaxLogitBiasEntries,
                                       " token id: bias entries"));
    }
    for (const auto& [key, value] : bias.items()) {
      int32_t id = 0;
      if (!absl::SimpleAtoi(key, &id) || id < 0) {
        return InvalidField("logit_bias",
                            absl::StrCat("key \"", key.substr(0, 32), "\" is not a token id"));
      }
      if (!value.is_number()) return InvalidField("logit_bias", "values must be numbers");
      (*sampling->mutable_logit_bias())[id] = value.get<float>();
    }
  }
  if (Present(body, "allowed_token_ids")) {
    const json& ids = body["allowed_token_ids"];
    if (!ids.is_array() || ids.size() > kMaxPromptTokenIds) {
      return InvalidField("allowed_token_ids", "must be an array of token ids");
    }
    for (const json& id : ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        return InvalidField("allowed_token_ids", "must hold token ids");
      }
      sampling->add_allowed_token_ids(id.get<int32_t>());
    }
  }
  if (Present(body, "bad_words")) {
    const json& words = body["bad_words"];
    if (!words.is_array() || words.size() > static_cast<size_t>(kMaxBadWords)) {
      return InvalidField("bad_words",
                          absl::StrCat("must be an array of at most ", kMaxBadWords, " strings"));
    }
    for (const json& word : words) {
      if (!word.is_string()) return InvalidField("bad_words", "must hold strings");
      sampling->add_bad_words(word.get<std::string>());
    }
  }
  return absl::OkStatus();
}

// Penalties and min_p; absent ones stay unset (the model's defaults apply).
absl::Status ParsePenalties(const json& body, pagoda::v1::SamplingParams* sampling) {
  absl::StatusOr<double> presence =
      Number(body, "presence_penalty", 0.0, -kMaxAbsPenalty, kMaxAbsPenalty);
  if (!presence.ok()) return presence.status();
  sampling->set_presence_penalty(static_cast<float>(*presence));
  absl::StatusOr<double> frequency =
      Number(body, "frequency_penalty", 0.0, -kMaxAbsPenalty, kMaxAbsPenalty);
  if (!frequency.ok()) return frequency.status();
  sampling->set_frequency_penalty(static_cast<float>(*frequency));
  if (Present(body, "repetition_penalty")) {
    absl::StatusOr<double> repetition =
        Number(body, "repetition_penalty", 1.0, 0.0, kMaxRepetitionPenalty);
    if (!repetition.ok()) return repetition.status();
    sampling->set_repetition_penalty(static_cast<float>(*repetition));
  }
  if (Present(body, "min_p")) {
    absl::StatusOr<double> min_p = Number(body, "min_p", 0.0, 0.0, 1.0);
    if (!min_p.ok()) return min_p.status();
    sampling->set_min_p(static_cast<float>(*min_p));
  }
  return ParseTokenLists(body, sampling);
}

absl::Status ParseSampling(const json& body, const SamplingDefaults& defaults,
                           OpenAiRequest* out) {
  pagoda::v1::SamplingParams* sampling = out->generate.mutable_sampling();
  absl::StatusOr<bool> beam = ParseBeamSearch(body, sampling);
  if (!beam.ok()) return beam.status();
  // Absent: the model's default when it has one (the validator fills it),
  // else OpenAI's 1; with beam search, 0 (beams are not sampled).
  if (Present(body, "temperature") || (!defaults.temperature.has_value() && !*beam)) {
    absl::StatusOr<double> temperature = Number(body, "temperature", 1.0, -kFloatMax, kFloatMax);
    if (!temperature.ok()) return temperature.status();
    sampling->set_temperature(static_cast<float>(*temperature));
  }
  if (Present(body, "top_p")) {
    absl::StatusOr<double> top_p = Number(body, "top_p", 1.0, -kFloatMax, kFloatMax);
    if (!top_p.ok()) return top_p.status();
    // 0 is the proto's "unset" (1): over HTTP it is refused, as vLLM does.
    if (*top_p <= 0) return InvalidField("top_p", absl::StrCat("must be in (0, 1], got ", *top_p));
    sampling->set_top_p(static_cast<float>(*top_p));
  }
  if (Present(body, "top_k")) {
    absl::StatusOr<int64_t> top_k = Integer(body, "top_k", 0, -1, INT32_MAX);
    if (!top_k.ok()) return top_k.status();
    sampling->set_top_k(*top_k < 0 ? 0 : static_cast<int32_t>(*top_k));
  }
  // OpenAI's seed may be any integer; 0 here means "the server picks".
  absl::StatusOr<int64_t> seed = Integer(body, "seed", 0, 0, INT64_MAX);
  if (!seed.ok()) return seed.status();
  sampling->set_seed(static_cast<uint64_t>(*seed));
  // Passed through: the validator decides what n the engine supports.
  absl::StatusOr<int64_t> n = Integer(body, "n", 1, 1, kMaxSequences);
  if (!n.ok()) return n.status();
  // Greedy samples are all the same sequence: run one and copy it (vLLM
  // answers n equal choices; the engine refuses several greedy sequences).
  const double temperature = sampling->has_temperature() ? sampling->temperature()
                                                         : defaults.temperature.value_or(1.0);
  if (*n > 1 && temperature < kGreedyTemperature && !*beam) {
    out->copies = static_cast<int>(*n);
    sampling->set_n(1);
  } else {
    sampling->set_n(static_cast<int32_t>(*n));
  }
  return ParsePenalties(body, sampling);
}

// vLLM's extra body field; the validator bounds it.
absl::Status ParsePriority(const json& body, OpenAiRequest* out) {
  absl::StatusOr<int64_t> priority = Integer(body, "priority", 0, INT32_MIN, INT32_MAX);
  if (!priority.ok()) return priority.status();
  out->generate.set_priority(static_cast<int32_t>(*priority));
  return absl::OkStatus();
}

// vLLM's prompt_logprobs field, and completions' echo with logprobs (the
// prompt's logprobs, OpenAI's legacy shape); neither in a stream, whose
// chunks carry only the choices' new text.
absl::Status ParsePromptLogprobs(const json& body, OpenAiRequest* out) {
  absl::StatusOr<int64_t> prompt = Integer(body, "prompt_logprobs", -1, 0, kMaxTopLogprobs);
  if (!prompt.ok()) return prompt.status();
  int top = static_cast<int>(*prompt);
  out->vllm_prompt_logprobs = top >= 0;
  if (out->echo && out->top_logprobs >= 0) top = std::max(top, out->top_logprobs);
  if (top < 0) return absl::OkStatus();
  if (Present(body, "stream") && body["stream"].is_boolean() && body["stream"].get<bool>()) {
    return InvalidField(out->vllm_prompt_logprobs ? "prompt_logprobs" : "echo",
                        "prompt logprobs are not supported in a stream");
  }
  out->generate.set_prompt_logprobs(top);
  return absl::OkStatus();
}

absl::Status ParseLogprobs(const json& body, OpenAiRequest* out) {
  if (out->chat) {
    absl::StatusOr<bool> logprobs = Boolean(body, "logprobs", false);
    if (!logprobs.ok()) return logprobs.status();
    absl::StatusOr<int64_t> top = Integer(body, "top_logprobs", 0, 0, kMaxTopLogprobs);
    if (!top.ok()) return top.status();
    if (*logprobs) out->top_logprobs = static_cast<int>(*top);
  } else {
    absl::StatusOr<int64_t> top = Integer(body, "logprobs", -1, 0, kMaxTopLogprobs);
    if (!top.ok()) return top.status();
    out->top_logprobs = static_cast<int>(*top);
  }
  // The engine returns the sampled token's logprob with its top list, so
  // ask for at least one entry.
  if (out->top_logprobs >= 0) out->generate.set_logprobs(std::max(1, out->top_logprobs));
  return ParsePromptLogprobs(body, out);
}

absl::Status ParseStopping(const json& body, int default_max_tokens, OpenAiRequest* out) {
  pagoda::v1::StoppingCriteria* stopping = out->generate.mutable_stopping();
  const char* max_key =
      Present(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  absl::StatusOr<int64_t> max_tokens = Integer(body, max_key, default_max_tokens, 1, INT32_MAX);
  if (!max_tokens.ok()) return max_tokens.status();
  stopping->set_max_tokens(static_cast<int32_t>(*max_tokens));
  absl::StatusOr<int64_t> min_tokens = Integer(body, "min_tokens", 0, 0, INT32_MAX);
  if (!min_tokens.ok()) return min_tokens.status();
  stopping->set_min_tokens(static_cast<int32_t>(*min_tokens));
  if (Present(body, "ignore_eos")) {
    if (!body["ignore_eos"].is_boolean()) return InvalidField("ignore_eos", "must be a boolean");
    stopping->set_ignore_eos(body["ignore_eos"].get<bool>());
  }
  absl::StatusOr<bool> include_stop = Boolean(body, "include_stop_str_in_output", false);
  if (!include_stop.ok()) return include_stop.status();
  stopping->set_include_stop_str_in_output(*include_stop);
  return ParseStop(body, stopping);
}

absl::Status ParseStreaming(const json& body, OpenAiRequest* out) {
  if (Present(body, "stream")) {
    if (!body["stream"].is_boolean()) return InvalidField("stream", "must be a boolean");
    out->stream = body["stream"].get<bool>();
  }
  if (Present(body, "stream_options")) {
    const json& options = body["stream_options"];
    if (!options.is_object()) return InvalidField("stream_options", "must be an object");
    if (!out->stream) return InvalidField("stream_options", "only allowed when stream is true");
    for (const char* key : {"include_usage", "continuous_usage_stats"}) {
      if (Present(options, key) && !options[key].is_boolean()) {
        return InvalidField(absl::StrCat("stream_options.", key), "must be a boolean");
      }
    }
    out->include_usage = Boolean(options, "include_usage", false).value_or(false);
    out->continuous_usage_stats = Boolean(options, "continuous_usage_stats", false).value_or(false);
  }
  return absl::OkStatus();
}

json FinishReasonJson(pagoda::v1::FinishReason reason) {
  const std::string_view name = FinishReasonName(reason);
  return name.empty() ? json() : json(std::string(name));
}

std::string TokenText(const Tokenizer* tokenizer, int32_t id) {
  if (tokenizer == nullptr) return absl::StrCat("token_id:", id);
  absl::StatusOr<std::string> text = tokenizer->Decode({id});
  return text.ok() ? *text : absl::StrCat("token_id:", id);
}

json Bytes(const std::string& text) {
  json out = json::array();
  for (unsigned char byte : text) out.push_back(static_cast<int>(byte));
  return out;
}

// OpenAI's logprobs of a choice: the legacy completions shape or chat's.
json LogprobsJson(const OpenAiRequest& request, const pagoda::v1::SequenceOutput& output,
                  const Tokenizer* tokenizer) {
  if (request.top_logprobs < 0) return json();
  if (request.chat) {
    json content = json::array();
    for (const pagoda::v1::TokenLogprobs& token : output.logprobs()) {
      const std::string text = TokenText(tokenizer, token.token_id());
      json top = json::array();
      for (int i = 0; i < token.top_size() && i < request.top_logprobs; ++i) {
        const std::string alternative = TokenText(tokenizer, token.top(i).token_id());
        top.push_back({{"token", alternative},
                       {"logprob", token.top(i).logprob()},
                       {"bytes", Bytes(alternative)}});
      }
      content.push_back({{"token", text},
                         {"logprob", token.logprob()},
                         {"bytes", Bytes(text)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       offsets = json::array();
  size_t offset = 0;
  for (const pagoda::v1::TokenLogprobs& token : output.logprobs()) {
    const std::string text = TokenText(tokenizer, token.token_id());
    tokens.push_back(text);
    token_logprobs.push_back(token.logprob());
    json top = json::object();
    for (int i = 0; i < token.top_size() && i < request.top_logprobs; ++i) {
      top[TokenText(tokenizer, token.top(i).token_id())] = token.top(i).logprob();
    }
    top_logprobs.push_back(top);
    offsets.push_back(offset);
    offset += text.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top_logprobs},
          {"text_offset", offsets}};
}

// vLLM's prompt_logprobs: null for the first prompt token, then per
// position {token id: {logprob, rank, decoded_token}} for the prompt's
// token and the top ones (ranks of the top ones; the prompt's token has a
// rank where it is among them).
json VllmPromptLogprobsJson(const pagoda::v1::GenerateResponse& response,
                            const Tokenizer* tokenizer) {
  json out = json::array({nullptr});
  for (const pagoda::v1::TokenLogprobs& entry : response.prompt_logprobs()) {
    json position = json::object();
    for (int i = 0; i < entry.top_size(); ++i) {
      position[std::to_string(entry.top(i).token_id())] = {
          {"logprob", entry.top(i).logprob()},
          {"rank", i + 1},
          {"decoded_token", TokenText(tokenizer, entry.top(i).token_id())}};
    }
    const std::string key = std::to_string(entry.token_id());
    if (!position.contains(key)) {
      position[key] = {{"logprob", entry.logprob()},
                       {"decoded_token", TokenText(tokenizer, entry.token_id())}};
    }
    out.push_back(std::move(position));
  }
  return out;
}

// Tool call ids: "call_" + this + "_<i>", from the request and choice.
std::string ToolCallIdPrefix(const std::string& request_id, int index) {
  return absl::StrFormat("%016x", std::hash<std::string>()(absl::StrCat(request_id, "/", index)));
}

// A chat choice's delta: its text, or with tools what ToolCallStream lets
// out (tool calls when they are read); the finish reason becomes
// "tool_calls" when calls were made (not for a named function, as OpenAI).
json ChatDelta(const OpenAiRequest& request, const std::string& request_id,
               const pagoda::v1::SequenceOutput& output, ChoiceStream* stream, json* choice) {
  if (request.tools.choice == ToolChoice::kNone) return {{"content", output.text()}};
  if (stream->tools == nullptr) {
    stream->tools = std::make_unique<ToolCallStream>(
        &request.tools, request.tool_parser, ToolCallIdPrefix(request_id, output.index()));
  }
  json delta = stream->tools->Feed(output.text());
  if (delta.is_null()) delta = json::object();
  if (output.finish_reason() == pagoda::v1::FINISH_REASON_UNSPECIFIED) return delta;
  bool made_calls = false;
  const json tail = stream->tools->Finish(&made_calls);
  if (tail.contains("content")) {
    delta["content"] = delta.value("content", "") + tail["content"].get<std::string>();
  }
  if (tail.contains("tool_calls")) delta["tool_calls"] = tail["tool_calls"];
  if (made_calls && output.finish_reason() == pagoda::v1::FINISH_REASON_STOP &&
      request.tools.choice != ToolChoice::kNamed) {
    (*choice)["finish_reason"] = "tool_calls";
  }
  return delta;
}

std::string ResponseId(const OpenAiRequest& request, const std::string& request_id) {
  return absl::StrCat(request.chat ? "chatcmpl-" : "cmpl-", request_id);
}

json Usage(int prompt_tokens, int completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

}  // namespace

pagoda::v1::GenerateRequest PromptRequest(const OpenAiRequest& request, size_t index) {
  pagoda::v1::GenerateRequest out = request.generate;
  if (index < request.prompts.size()) {
    out.clear_prompt();
    out.clear_prompt_token_ids();
    out.MergeFrom(request.prompts[index]);
  }
  return out;
}

bool NeedsOrderedBody(const json& body) {
  return body.is_object() && (body.contains("response_format") ||
                              body.contains("structured_outputs") || body.contains("tools") ||
                              body.contains("chat_template_kwargs"));
}

absl::StatusOr<TokenizeRequest> ParseTokenizeRequest(const json& body,
                                                     const nlohmann::ordered_json* ordered) {
  if (!body.is_object()) return absl::InvalidArgumentError("body: must be a JSON object");
  TokenizeRequest out;
  if (Present(body, "model")) {
    if (!body["model"].is_string()) return InvalidField("model", "must be a string");
    out.model = body["model"].get<std::string>();
  }
  if (Present(body, "messages")) {
    OpenAiRequest chat;
    if (absl::Status status = ParseMessages(body, ordered, &chat); !status.ok()) return status;
    std::vector<std::string> names;
    if (absl::Status s = ParseToolList(body, ordered, &out.tools, &names); !s.ok()) return s;
    if (absl::Status s = ParseChatTemplateKwargs(body, ordered, &out.chat_template_kwargs);
        !s.ok()) {
      return s;
    }
    out.chat = true;
    out.messages = std::move(chat.messages);
    out.add_special_tokens = false;  // The template writes its own (vLLM's default).
  } else if (Present(body, "prompt") && body["prompt"].is_string()) {
    out.prompt = body["prompt"].get<std::string>();
  } else {
    return InvalidField("prompt", "required: a string (or messages)");
  }
  for (auto [key, field] : {std::pair{"add_special_tokens", &out.add_special_tokens},
                            std::pair{"add_generation_prompt", &out.add_generation_prompt},
                            std::pair{"return_token_strs", &out.return_token_strs}}) {
    if (!Present(body, key)) continue;
    if (!body[key].is_boolean()) return InvalidField(key, "must be a boolean");
    *field = body[key].get<bool>();
  }
  return out;
}

absl::StatusOr<std::vector<int>> ParseDetokenizeRequest(const json& body, int vocab_size,
                                                        std::string* model) {
  if (!body.is_object()) return absl::InvalidArgumentError("body: must be a JSON object");
  if (Present(body, "model")) {
    if (!body["model"].is_string()) return InvalidField("model", "must be a string");
    *model = body["model"].get<std::string>();
  }
  if (!Present(body, "tokens") || !body["tokens"].is_array() ||
      body["tokens"].size() > kMaxPromptTokenIds) {
    return InvalidField(
        "tokens", absl::StrCat("required: an array of at most ", kMaxPromptTokenIds, " token ids"));
  }
  std::vector<int> ids;
  ids.reserve(body["tokens"].size());
  for (const json& id : body["tokens"]) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size) {
      return InvalidField("tokens", absl::StrCat("must hold token ids in [0, ", vocab_size, ")"));
    }
    ids.push_back(id.get<int>());
  }
  return ids;
}

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(const json& body, bool chat,
                                                 int default_chat_max_tokens) {
  return ParseOpenAiRequest(body, chat, default_chat_max_tokens, SamplingDefaults{});
}

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(const json& body, bool chat,
                                                 int default_chat_max_tokens,
                                                 const SamplingDefaults& defaults,
                                                 const nlohmann::ordered_json* ordered_body,
                                                 ToolCallParser tool_parser) {
  if (!body.is_object()) return absl::InvalidArgumentError("body: must be a JSON object");
  OpenAiRequest out;
  out.chat = chat;
  // Without a model the server's one model answers (as vLLM).
  if (Present(body, "model")) {
    if (!body["model"].is_string()) return InvalidField("model", "must be a string");
    out.model = body["model"].get<std::string>();
  }
  out.tool_parser = tool_parser;
  absl::Status status =
      chat ? ParseMessages(body, ordered_body, &out) : ParsePrompts(body, &out.prompts);
  if (status.ok() && !chat) out.generate.MergeFrom(out.prompts[0]);
  if (status.ok() && Present(body, "echo")) {
    if (!body["echo"].is_boolean()) {
      status = InvalidField("echo", "must be a boolean");
    } else if (body["echo"].get<bool>()) {
      if (chat) status = InvalidField("echo", "is only supported by /v1/completions");
      out.echo = true;
    }
  }
  if (status.ok() && chat) {
    absl::StatusOr<bool> add_generation_prompt = Boolean(body, "add_generation_prompt", true);
    status = add_generation_prompt.status();
    out.add_generation_prompt = add_generation_prompt.value_or(true);
  }
  if (status.ok() && !chat && Present(body, "chat_template_kwargs")) {
    status = InvalidField("chat_template_kwargs", "only /v1/chat/completions takes them");
  }
  if (status.ok() && chat) {
    status = ParseChatTemplateKwargs(body, ordered_body, &out.chat_template_kwargs);
  }
  if (status.ok()) status = RefuseUnsupported(body);
  if (status.ok()) status = ParseConstraint(body, ordered_body, &out.generate);
  if (status.ok()) status = ParseToolChoice(body, ordered_body, &out);
  if (status.ok()) status = ParseSampling(body, defaults, &out);
  if (status.ok()) status = ParseLogprobs(body, &out);
  if (status.ok()) status = ParsePriority(body, &out);
  if (status.ok()) status = ParseStopping(body, chat ? default_chat_max_tokens : 16, &out);
  if (status.ok()) status = ParseStreaming(body, &out);
  if (!status.ok()) return status;
  return out;
}

json MakeOpenAiResponse(const OpenAiRequest& request, const pagoda::v1::GenerateResponse& response,
                        const std::string& model, int64_t created, const Tokenizer* tokenizer) {
  json choices = json::array();
  int completion_tokens = 0;
  for (const pagoda::v1::SequenceOutput& output : response.outputs()) {
    completion_tokens += output.token_ids_size();
    json choice = {{"index", output.index()},
                   {"finish_reason", FinishReasonJson(output.finish_reason())},
                   {"logprobs", LogprobsJson(request, output, tokenizer)}};
    if (request.chat && request.tools.choice != ToolChoice::kNone) {
      const ToolCallsReply reply =
          ExtractToolCalls(request.tools, request.tool_parser, output.text());
      choice["message"] = {{"role", "assistant"},
                           {"content", reply.content_null ? json() : json(reply.content)}};
      if (!reply.calls.empty()) {
        choice["message"]["tool_calls"] =
            ToolCallsJson(reply.calls, ToolCallIdPrefix(response.request_id(), output.index()),
                          /*indexed=*/false);
        if (output.finish_reason() == pagoda::v1::FINISH_REASON_STOP &&
            request.tools.choice != ToolChoice::kNamed) {
          choice["finish_reason"] = "tool_calls";
        }
      }
    } else if (request.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", output.text()}};
    } else {
      choice["text"] = output.text();
      if (request.vllm_prompt_logprobs) {
        choice["prompt_logprobs"] = VllmPromptLogprobsJson(response, tokenizer);
      }
    }
    choices.push_back(std::move(choice));
  }
  json whole = {{"id", ResponseId(request, response.request_id())},
                {"object", request.chat ? "chat.completion" : "text_completion"},
                {"created", created},
                {"model", model},
                {"choices", choices},
                {"usage", Usage(response.prompt_token_count(), completion_tokens)}};
  if (request.chat && request.vllm_prompt_logprobs) {
    whole["prompt_logprobs"] = VllmPromptLogprobsJson(response, tokenizer);
  }
  return whole;
}

void PrependPromptLogprobs(const OpenAiRequest& request,
                           const std::vector<int32_t>& prompt_token_ids,
                           const pagoda::v1::GenerateResponse& response,
                           const Tokenizer* tokenizer, json* logprobs) {
  if (prompt_token_ids.empty() || !logprobs->is_object()) return;
  json tokens = json::array({TokenText(tokenizer, prompt_token_ids[0])});
  json token_logprobs = json::array({nullptr}), top_logprobs = json::array({nullptr});
  json offsets = json::array({0});
  size_t offset = tokens[0].get<std::string>().size();
  for (const pagoda::v1::TokenLogprobs& entry : response.prompt_logprobs()) {
    const std::string text = TokenText(tokenizer, entry.token_id());
    tokens.push_back(text);
    token_logprobs.push_back(entry.logprob());
    json top = json::object();
    for (int i = 0; i < entry.top_size() && i < request.top_logprobs; ++i) {
      top[TokenText(tokenizer, entry.top(i).token_id())] = entry.top(i).logprob();
    }
    top_logprobs.push_back(std::move(top));
    offsets.push_back(offset);
    offset += text.size();
  }
  for (size_t i = 0; i < (*logprobs)["tokens"].size(); ++i) {
    tokens.push_back((*logprobs)["tokens"][i]);
    token_logprobs.push_back((*logprobs)["token_logprobs"][i]);
    top_logprobs.push_back((*logprobs)["top_logprobs"][i]);
    offsets.push_back(offset + (*logprobs)["text_offset"][i].get<size_t>());
  }
  *logprobs = {{"tokens", tokens},
               {"token_logprobs", token_logprobs},
               {"top_logprobs", top_logprobs},
               {"text_offset", offsets}};
}

json MakeOpenAiChunk(const OpenAiRequest& request, const pagoda::v1::GenerateResponse& message,
                     const std::string& model, int64_t created, const Tokenizer* tokenizer,
                     std::vector<ChoiceStream>* streams) {
  json choices = json::array();
  for (const pagoda::v1::SequenceOutput& output : message.outputs()) {
    const bool finished = output.finish_reason() != pagoda::v1::FINISH_REASON_UNSPECIFIED;
    if (output.text().empty() && !finished && request.top_logprobs < 0) continue;
    json choice = {{"index", output.index()},
                   {"finish_reason", FinishReasonJson(output.finish_reason())},
                   {"logprobs", LogprobsJson(request, output, tokenizer)}};
    if (request.chat) {
      if (streams->size() <= static_cast<size_t>(output.index())) {
        streams->resize(output.index() + 1);
      }
      ChoiceStream& stream = (*streams)[output.index()];
      json delta = ChatDelta(request, message.request_id(), output, &stream, &choice);
      if (delta.empty() && !finished && request.top_logprobs < 0) continue;
      if (!stream.role_sent) {
        delta["role"] = "assistant";
        stream.role_sent = true;
      }
      choice["delta"] = std::move(delta);
    } else {
      choice["text"] = output.text();
    }
    choices.push_back(std::move(choice));
  }
  if (choices.empty()) return json();
  return {{"id", ResponseId(request, message.request_id())},
          {"object", request.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", choices}};
}

json MakeOpenAiUsageChunk(const OpenAiRequest& request, const std::string& request_id,
                          int prompt_tokens, int completion_tokens, const std::string& model,
                          int64_t created) {
  return {{"id", ResponseId(request, request_id)},
          {"object", request.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array()},
          {"usage", Usage(prompt_tokens, completion_tokens)}};
}

int HttpStatusOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kUnimplemented:  // Unsupported options are the client's to change.
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

json MakeOpenAiError(const absl::Status& status) {
  return MakeOpenAiError(HttpStatusOf(status), std::string(status.message()));
}

json MakeOpenAiError(int http_status, const std::string& message) {
  std::string type = "internal_error";
  if (http_status >= 400 && http_status < 500) type = "invalid_request_error";
  if (http_status == 401 || http_status == 403) type = "authentication_error";
  if (http_status == 429) type = "rate_limit_error";
  if (http_status == 503) type = "service_unavailable";
  // "param": the field a refused request's message names, as OpenAI does.
  json param = nullptr;
  if (type == "invalid_request_error") {
    if (std::optional<std::string> field = FieldNamedBy(message)) param = *field;
  }
  return {{"error", {{"message", message}, {"type", type}, {"param", param}, {"code", http_status}}}};
}

}  // namespace pagoda::scheduler
