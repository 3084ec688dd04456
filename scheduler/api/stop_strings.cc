#include "scheduler/api/stop_strings.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "text/utf8.h"

namespace pagoda::scheduler {
namespace {

bool IsContinuationByte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

}  // namespace

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings,
                                     bool include_stop_string)
    : stop_strings_(std::move(stop_strings)), include_stop_string_(include_stop_string) {
  for (const std::string& stop : stop_strings_) longest_ = std::max(longest_, stop.size());
}

std::string StopStringMatcher::Append(const std::string& text) {
  if (stopped_) return "";
  if (stop_strings_.empty()) return text;
  // pending_ is only the held-back tail (under longest_ bytes), so the
  // search is short.
  pending_ += text;
  size_t best = std::string::npos;
  size_t best_length = 0;
  for (const std::string& stop : stop_strings_) {
    const size_t at = pending_.find(stop);
    if (at < best) {
      best = at;
      best_length = stop.size();
    }
  }
  if (best != std::string::npos) {
    stopped_ = true;
    std::string shown = pending_.substr(0, best + (include_stop_string_ ? best_length : 0));
    pending_.clear();
    return shown;
  }
  // Keep the last longest-1 bytes (a stop string may start there), widened
  // to a character boundary.
  size_t keep_from = pending_.size() >= longest_ ? pending_.size() - (longest_ - 1) : 0;
  while (keep_from > 0 && keep_from < pending_.size() && IsContinuationByte(pending_[keep_from])) {
    --keep_from;
  }
  std::string shown = pending_.substr(0, keep_from);
  pending_.erase(0, keep_from);
  return shown;
}

std::string StopStringMatcher::Flush() {
  std::string shown = std::move(pending_);
  pending_.clear();
  return shown;
}

absl::Status CheckStopStrings(const std::vector<std::string>& stop_strings, bool has_tokenizer,
                              const std::string& field) {
  if (stop_strings.empty()) return absl::OkStatus();
  if (!has_tokenizer) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": stop strings need a tokenizer; this model has none"));
  }
  if (stop_strings.size() > static_cast<size_t>(kMaxStopStrings)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": at most ", kMaxStopStrings,
                                                   " stop strings, got ", stop_strings.size()));
  }
  for (size_t i = 0; i < stop_strings.size(); ++i) {
    const std::string& stop = stop_strings[i];
    if (stop.empty() || stop.size() > static_cast<size_t>(kMaxStopStringBytes) ||
        !IsValidUtf8(stop)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "[", i, "]: must be 1 to ", kMaxStopStringBytes, " bytes of UTF-8"));
    }
  }
  return absl::OkStatus();
}

}  // namespace pagoda::scheduler
