#include "scheduler/config/kv_events_config.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/flag_checks.h"
#include "common/json_fields.h"
#include "nlohmann/json.hpp"

namespace pagoda::scheduler {
namespace {

using Json = nlohmann::json;

constexpr const char* kKeys[] = {"enable_kv_cache_events", "publisher",    "endpoint",
                                 "replay_endpoint",        "buffer_steps", "hwm",
                                 "max_queue_size",         "topic"};

absl::Status Invalid(absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("--kv-events-config: ", problem));
}

// The publisher vLLM's __post_init__ picks, after checking a given one.
absl::StatusOr<std::string> Publisher(const Json& object, bool enabled) {
  absl::StatusOr<std::optional<std::string>> publisher =
      json_fields::OptionalString(object, "publisher");
  if (!publisher.ok()) return Invalid(publisher.status().message());
  if (!publisher->has_value()) return std::string(enabled ? "zmq" : "null");
  if (**publisher != "zmq" && **publisher != "null") {
    return Invalid(absl::StrCat("publisher \"", **publisher, "\": expected \"zmq\" or \"null\""));
  }
  return **publisher;
}

// The string fields, vLLM's defaults where absent.
absl::Status ReadStrings(const Json& object, KvEventOptions& events) {
  for (auto [key, field, fallback] : {std::tuple{"endpoint", &events.endpoint, "tcp://*:5557"},
                                      std::tuple{"replay_endpoint", &events.replay_endpoint, ""},
                                      std::tuple{"topic", &events.topic, ""}}) {
    absl::StatusOr<std::optional<std::string>> value = json_fields::OptionalString(object, key);
    if (!value.ok()) return Invalid(value.status().message());
    *field = value->value_or(fallback);
  }
  if (events.endpoint.empty()) return Invalid("endpoint must not be empty");
  return absl::OkStatus();
}

// The integer fields, vLLM's defaults where absent, each in its range.
absl::Status ReadIntegers(const Json& object, KvEventOptions& events) {
  for (auto [key, field, fallback, low] :
       {std::tuple{"buffer_steps", &events.replay_buffer, 10000, 0},
        std::tuple{"hwm", &events.send_high_water_mark, 100000, 1},
        std::tuple{"max_queue_size", &events.queue_batches, 100000, 1}}) {
    absl::StatusOr<std::optional<int>> value = json_fields::OptionalInt(object, key);
    if (!value.ok()) return Invalid(value.status().message());
    *field = value->value_or(fallback);
    if (absl::Status range = flag_check::Range(absl::StrCat("kv-events-config.", key), *field, low,
                                               kMaxKvEventBatches);
        !range.ok()) {
      return range;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<KvEventOptions> ParseKvEventsConfig(absl::string_view json) {
  const Json object = Json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) return Invalid("not valid JSON");
  if (!object.is_object()) return Invalid("must be a JSON object");
  if (std::optional<std::string> unknown = json_fields::FirstUnknownKey(object, kKeys)) {
    return Invalid(absl::StrCat("unknown key \"", *unknown, "\""));
  }
  absl::StatusOr<std::optional<bool>> enabled =
      json_fields::OptionalBool(object, "enable_kv_cache_events");
  if (!enabled.ok()) return Invalid(enabled.status().message());
  absl::StatusOr<std::string> publisher = Publisher(object, enabled->value_or(false));
  if (!publisher.ok()) return publisher.status();
  KvEventOptions events;
  if (absl::Status strings = ReadStrings(object, events); !strings.ok()) return strings;
  if (absl::Status integers = ReadIntegers(object, events); !integers.ok()) return integers;
  // Off (vLLM's null publisher, or events not enabled): every field checked
  // all the same, none used.
  if (!enabled->value_or(false) || *publisher == "null") return KvEventOptions{};
  return events;
}

}  // namespace pagoda::scheduler
