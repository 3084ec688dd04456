#include "scheduler/api/json_body.h"

#include <string_view>

#include "absl/strings/str_cat.h"

namespace pagoda::scheduler {
namespace {

// Parses `text`; `too_deep` tells whether it nests past kMaxJsonDepth (its
// deeper values are then dropped while parsing, never built).
template <typename Json>
Json ParseBounded(absl::string_view text, bool* too_deep) {
  *too_deep = false;
  typename Json::parser_callback_t bound = [too_deep](int depth, typename Json::parse_event_t,
                                                      Json&) {
    if (depth <= kMaxJsonDepth) return true;
    *too_deep = true;
    return false;
  };
  return Json::parse(std::string_view(text.data(), text.size()), bound,
                     /*allow_exceptions=*/false);
}

template <typename Json>
absl::StatusOr<Json> ParseBody(absl::string_view text) {
  bool too_deep = false;
  Json parsed = ParseBounded<Json>(text, &too_deep);
  if (too_deep) {
    return absl::InvalidArgumentError(
        absl::StrCat("body: arrays and objects nested deeper than ", kMaxJsonDepth, " levels"));
  }
  if (parsed.is_discarded()) return absl::InvalidArgumentError("body: not valid JSON (UTF-8)");
  return parsed;
}

}  // namespace

absl::StatusOr<nlohmann::json> ParseJsonBody(absl::string_view text) {
  return ParseBody<nlohmann::json>(text);
}

absl::StatusOr<nlohmann::ordered_json> ParseOrderedJsonBody(absl::string_view text) {
  return ParseBody<nlohmann::ordered_json>(text);
}

nlohmann::ordered_json ParseOrderedJsonOrDiscarded(absl::string_view text) {
  bool too_deep = false;
  nlohmann::ordered_json parsed = ParseBounded<nlohmann::ordered_json>(text, &too_deep);
  return too_deep ? nlohmann::ordered_json(nlohmann::ordered_json::value_t::discarded) : parsed;
}

}  // namespace pagoda::scheduler
