#include "common/flag_checks.h"

#include <charconv>

namespace pagoda::flag_check {

absl::Status Port(absl::string_view flag, int value, int lowest_special, absl::string_view note) {
  if (value >= lowest_special && value <= 0) return absl::OkStatus();
  return Range(flag, value, 1, 65535, note);
}

std::string Shortest(double value) {
  char text[32];
  const std::to_chars_result result = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, result.ptr);
}

absl::Status RealRange(absl::string_view flag, double value, double low, double high,
                       bool low_inclusive) {
  const bool above_low = low_inclusive ? value >= low : value > low;
  if (above_low && value <= high) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " ", Shortest(value), " is out of range: expected ",
                   low_inclusive ? "[" : "(", Shortest(low), ", ", Shortest(high), "]"));
}

absl::Status FirstError(std::initializer_list<absl::Status> checks) {
  for (const absl::Status& status : checks) {
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace pagoda::flag_check
