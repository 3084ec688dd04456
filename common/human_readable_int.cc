#include "common/human_readable_int.h"

#include <algorithm>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"

namespace pagoda {

std::optional<int64_t> HumanReadableInteger(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (text.size() < 2) return std::nullopt;
  static const std::map<char, double> kMultipliers = {
      {'k', 1e3},    {'m', 1e6},       {'g', 1e9},          {'t', 1e12},
      {'K', 1024.0}, {'M', 1048576.0}, {'G', 1073741824.0}, {'T', 1099511627776.0}};
  const auto multiplier = kMultipliers.find(text.back());
  if (multiplier == kMultipliers.end()) return std::nullopt;
  const absl::string_view number = text.substr(0, text.size() - 1);
  const bool decimal_suffix = absl::ascii_islower(text.back());
  // vLLM's pattern: digits, optionally "." and digits.
  const size_t point = number.find('.');
  const auto digits = [](absl::string_view part) {
    return !part.empty() && std::all_of(part.begin(), part.end(), absl::ascii_isdigit);
  };
  if (!digits(number.substr(0, point)) ||
      (point != absl::string_view::npos && !digits(number.substr(point + 1)))) {
    return std::nullopt;
  }
  double value = 0;
  if (point != absl::string_view::npos) {
    if (!decimal_suffix || !absl::SimpleAtod(number, &value)) return std::nullopt;
  } else {
    int64_t whole = 0;
    if (!absl::SimpleAtoi(number, &whole)) return std::nullopt;
    value = static_cast<double>(whole);
  }
  value *= multiplier->second;
  // Past int64: left as text, which the flag's own reading then refuses.
  if (!(value < 9.2e18)) return std::nullopt;
  return static_cast<int64_t>(value);
}

}  // namespace pagoda
