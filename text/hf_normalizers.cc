// Normalizers of hf_text_steps.h.
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "text/hf_text_steps.h"
#include "unicode/normalizer2.h"
#include "unicode/unistr.h"

namespace pagoda {
namespace {

using nlohmann::json;

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(const icu::Normalizer2* normalizer) : normalizer_(normalizer) {}
  std::string Normalize(std::string text) const override {
    UErrorCode error = U_ZERO_ERROR;
    const icu::UnicodeString normalized =
        normalizer_->normalize(icu::UnicodeString::fromUTF8(text), error);
    if (U_FAILURE(error)) return text;  // Only on allocation failure.
    std::string out;
    normalized.toUTF8String(out);
    return out;
  }

 private:
  const icu::Normalizer2* normalizer_;  // ICU's singleton.
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string Normalize(std::string text) const override {
    return text.empty() ? text : prefix_ + text;
  }

 private:
  const std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::string pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::string Normalize(std::string text) const override {
    return absl::StrReplaceAll(text, {{pattern_, content_}});
  }

 private:
  const std::string pattern_;
  const std::string content_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  std::string Normalize(std::string text) const override {
    for (const auto& step : steps_) text = step->Normalize(std::move(text));
    return text;
  }

 private:
  const std::vector<std::unique_ptr<Normalizer>> steps_;
};

absl::StatusOr<const icu::Normalizer2*> IcuNormalizer(const std::string& type) {
  UErrorCode error = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = nullptr;
  if (type == "NFC") normalizer = icu::Normalizer2::getNFCInstance(error);
  if (type == "NFD") normalizer = icu::Normalizer2::getNFDInstance(error);
  if (type == "NFKC") normalizer = icu::Normalizer2::getNFKCInstance(error);
  if (type == "NFKD") normalizer = icu::Normalizer2::getNFKDInstance(error);
  if (normalizer == nullptr || U_FAILURE(error)) {
    return absl::InternalError(absl::StrCat("ICU has no ", type, " normalizer"));
  }
  return normalizer;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const json& spec) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.is_object() ? spec.value("type", "") : "";
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    absl::StatusOr<const icu::Normalizer2*> normalizer = IcuNormalizer(type);
    if (!normalizer.ok()) return normalizer.status();
    return std::make_unique<UnicodeNormalizer>(*normalizer);
  }
  if (type == "Prepend" && spec.contains("prepend") && spec["prepend"].is_string()) {
    return std::make_unique<PrependNormalizer>(spec["prepend"].get<std::string>());
  }
  if (type == "Replace" && spec.contains("pattern") && spec["pattern"].contains("String") &&
      spec["pattern"]["String"].is_string() && spec.contains("content") &&
      spec["content"].is_string()) {
    return std::make_unique<ReplaceNormalizer>(spec["pattern"]["String"].get<std::string>(),
                                               spec["content"].get<std::string>());
  }
  if (type == "Sequence" && spec.contains("normalizers") && spec["normalizers"].is_array()) {
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const json& step : spec["normalizers"]) {
      absl::StatusOr<std::unique_ptr<Normalizer>> parsed = ParseNormalizer(step);
      if (!parsed.ok()) return parsed.status();
      if (*parsed != nullptr) steps.push_back(*std::move(parsed));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tokenizer.json: unsupported normalizer ", spec.dump().substr(0, 200)));
}

}  // namespace pagoda
