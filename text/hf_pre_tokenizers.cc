// Pre-tokenizers of hf_text_steps.h. Split patterns run on ICU's regex
// engine, which has the Unicode classes (\p{L}, \p{N}), case-insensitive
// groups and lookahead that the Llama 3 and Qwen2 patterns need.
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "text/byte_level.h"
#include "text/hf_text_steps.h"
#include "unicode/regex.h"
#include "unicode/unistr.h"

namespace pagoda {
namespace {

using nlohmann::json;

// GPT-2's pattern, which ByteLevel applies when use_regex is true.
constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Splits on every match of a regex, keeping matches and the text between
// them as separate pieces ("Isolated").
class RegexSplitter {
 public:
  static absl::StatusOr<std::unique_ptr<RegexSplitter>> Create(const std::string& pattern) {
    UErrorCode error = U_ZERO_ERROR;
    UParseError parse_error;
    std::unique_ptr<icu::RegexPattern> compiled(
        icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(pattern), 0, parse_error, error));
    if (U_FAILURE(error)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer.json: cannot compile split pattern ", pattern, ": ", u_errorName(error)));
    }
    return std::unique_ptr<RegexSplitter>(new RegexSplitter(std::move(compiled)));
  }

  void Split(const std::string& piece, std::vector<std::string>* out) const {
    const icu::UnicodeString text = icu::UnicodeString::fromUTF8(piece);
    UErrorCode error = U_ZERO_ERROR;
    std::unique_ptr<icu::RegexMatcher> matcher(pattern_->matcher(text, error));
    if (U_FAILURE(error)) {
      out->push_back(piece);
      return;
    }
    int32_t last = 0;
    auto emit = [&](int32_t begin, int32_t end) {
      if (end <= begin) return;
      std::string utf8;
      text.tempSubStringBetween(begin, end).toUTF8String(utf8);
      out->push_back(std::move(utf8));
    };
    while (matcher->find(error) && U_SUCCESS(error)) {
      const int32_t begin = matcher->start(error);
      const int32_t end = matcher->end(error);
      if (end == begin) continue;
      emit(last, begin);
      emit(begin, end);
      last = end;
    }
    emit(last, text.length());
  }

 private:
  explicit RegexSplitter(std::unique_ptr<icu::RegexPattern> pattern)
      : pattern_(std::move(pattern)) {}
  std::unique_ptr<icu::RegexPattern> pattern_;
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  explicit SplitPreTokenizer(std::unique_ptr<RegexSplitter> splitter)
      : splitter_(std::move(splitter)) {}
  void Split(std::vector<std::string>* pieces, bool) const override {
    std::vector<std::string> out;
    for (const std::string& piece : *pieces) splitter_->Split(piece, &out);
    pieces->swap(out);
  }

 private:
  std::unique_ptr<RegexSplitter> splitter_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<RegexSplitter> splitter)
      : add_prefix_space_(add_prefix_space), splitter_(std::move(splitter)) {}
  void Split(std::vector<std::string>* pieces, bool) const override {
    std::vector<std::string> split;
    for (std::string& piece : *pieces) {
      if (add_prefix_space_ && (piece.empty() || piece[0] != ' ')) piece.insert(0, " ");
      if (splitter_ != nullptr) {
        splitter_->Split(piece, &split);
      } else {
        split.push_back(std::move(piece));
      }
    }
    for (std::string& piece : split) piece = BytesToByteLevel(piece);
    pieces->swap(split);
  }

 private:
  const bool add_prefix_space_;
  std::unique_ptr<RegexSplitter> splitter_;  // Null when use_regex is false.
};

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, std::string prepend_scheme, bool split)
      : replacement_(std::move(replacement)),
        prepend_scheme_(std::move(prepend_scheme)),
        split_(split) {}
  void Split(std::vector<std::string>* pieces, bool first_section) const override {
    std::vector<std::string> out;
    for (size_t i = 0; i < pieces->size(); ++i) {
      std::string piece = absl::StrReplaceAll((*pieces)[i], {{" ", replacement_}});
      const bool prepend =
          prepend_scheme_ == "always" || (prepend_scheme_ == "first" && first_section && i == 0);
      if (prepend && piece.compare(0, replacement_.size(), replacement_) != 0) {
        piece.insert(0, replacement_);
      }
      if (!split_) {
        out.push_back(std::move(piece));
        continue;
      }
      // Each word keeps the replacement that precedes it ("MergedWithNext").
      size_t start = 0;
      for (size_t at = piece.find(replacement_, 1); at != std::string::npos;
           at = piece.find(replacement_, at + replacement_.size())) {
        if (at > start) out.push_back(piece.substr(start, at - start));
        start = at;
      }
      if (start < piece.size()) out.push_back(piece.substr(start));
    }
    pieces->swap(out);
  }

 private:
  const std::string replacement_;
  const std::string prepend_scheme_;
  const bool split_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void Split(std::vector<std::string>* pieces, bool first_section) const override {
    for (const auto& step : steps_) step->Split(pieces, first_section);
  }

 private:
  const std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParseSplit(const json& spec) {
  if (spec.value("behavior", "") != "Isolated" || spec.value("invert", false)) {
    return absl::InvalidArgumentError(
        "tokenizer.json: only Split with behavior Isolated and invert false is supported");
  }
  const json& pattern = spec.contains("pattern") ? spec["pattern"] : json();
  std::string regex;
  if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
    regex = pattern["Regex"].get<std::string>();
  } else if (pattern.contains("String") && pattern["String"].is_string()) {
    // A literal string, quoted for the regex engine.
    regex = absl::StrCat("\\Q", pattern["String"].get<std::string>(), "\\E");
  } else {
    return absl::InvalidArgumentError("tokenizer.json: Split needs a Regex or String pattern");
  }
  absl::StatusOr<std::unique_ptr<RegexSplitter>> splitter = RegexSplitter::Create(regex);
  if (!splitter.ok()) return splitter.status();
  return std::make_unique<SplitPreTokenizer>(*std::move(splitter));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParseByteLevel(const json& spec) {
  std::unique_ptr<RegexSplitter> splitter;
  if (spec.value("use_regex", true)) {
    absl::StatusOr<std::unique_ptr<RegexSplitter>> created = RegexSplitter::Create(kGpt2Pattern);
    if (!created.ok()) return created.status();
    splitter = *std::move(created);
  }
  return std::make_unique<ByteLevelPreTokenizer>(spec.value("add_prefix_space", false),
                                                 std::move(splitter));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const json& spec) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.is_object() ? spec.value("type", "") : "";
  if (type == "Split") return ParseSplit(spec);
  if (type == "ByteLevel") return ParseByteLevel(spec);
  if (type == "Metaspace") {
    // Older files say add_prefix_space instead of prepend_scheme.
    std::string scheme = spec.value("prepend_scheme", "");
    if (scheme.empty()) scheme = spec.value("add_prefix_space", true) ? "always" : "never";
    return std::make_unique<MetaspacePreTokenizer>(spec.value("replacement", "\xE2\x96\x81"),
                                                   scheme, spec.value("split", true));
  }
  if (type == "Sequence" && spec.contains("pretokenizers") && spec["pretokenizers"].is_array()) {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const json& step : spec["pretokenizers"]) {
      absl::StatusOr<std::unique_ptr<PreTokenizer>> parsed = ParsePreTokenizer(step);
      if (!parsed.ok()) return parsed.status();
      if (*parsed != nullptr) steps.push_back(*std::move(parsed));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tokenizer.json: unsupported pre_tokenizer ", spec.dump().substr(0, 200)));
}

}  // namespace pagoda
