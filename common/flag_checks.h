#ifndef PAGODA_COMMON_FLAG_CHECKS_H_
#define PAGODA_COMMON_FLAG_CHECKS_H_

// The range checks every Pagoda binary's config applies to its flags
// (pagoda-server's ServerConfig, pagoda-worker's WorkerConfig), so both
// refuse a value in the same one-line words: "--NAME VALUE is out of range:
// expected LOW to HIGH". Each returns INVALID_ARGUMENT naming the dashed flag.

#include <initializer_list>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace pagoda::flag_check {

// "--NAME VALUE is out of range: expected LOW to HIGH[, or NOTE]".
template <typename T>
absl::Status Range(absl::string_view flag, T value, T low, T high, absl::string_view note = "") {
  if (value >= low && value <= high) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", value,
                                                 " is out of range: expected ", low, " to ", high,
                                                 note.empty() ? "" : ", or ", note));
}

// A port: 1..65535, or one of the special values lowest_special..0 that
// `note` explains ("0 (off) or -1 (the OS picks one)").
absl::Status Port(absl::string_view flag, int value, int lowest_special, absl::string_view note);

// A real value in (low, high], or [low, high] when low_inclusive.
absl::Status RealRange(absl::string_view flag, double value, double low, double high,
                       bool low_inclusive);

// A double as the user would have typed it: the shortest text that reads
// back as the same value (99999999, not StrCat's 1e+08).
std::string Shortest(double value);

// The first error of a list of checks, OK if none.
absl::Status FirstError(std::initializer_list<absl::Status> checks);

}  // namespace pagoda::flag_check

#endif  // PAGODA_COMMON_FLAG_CHECKS_H_
