// Decoders of hf_text_steps.h, each as the tokenizers library's decode_chain.
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "text/byte_level.h"
#include "text/hf_text_steps.h"
#include "text/utf8.h"

namespace pagoda {
namespace {

using nlohmann::json;

// All tokens to bytes through the byte-level alphabet (a token with a
// character outside it, such as an added token, keeps its own bytes), then
// one lossily decoded string.
class ByteLevelDecoder : public Decoder {
 public:
  std::vector<std::string> DecodeChain(std::vector<std::string> tokens) const override {
    std::string bytes;
    for (const std::string& token : tokens) {
      std::optional<std::string> decoded = ByteLevelToBytes(token);
      bytes += decoded.has_value() ? *decoded : token;
    }
    return {Utf8Lossy(bytes)};
  }
  std::string TokenBytes(std::string token, bool* fused) const override {
    *fused = true;
    std::optional<std::string> decoded = ByteLevelToBytes(token);
    return decoded.has_value() ? *decoded : token;
  }
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::string pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::vector<std::string> DecodeChain(std::vector<std::string> tokens) const override {
    for (std::string& token : tokens) token = absl::StrReplaceAll(token, {{pattern_, content_}});
    return tokens;
  }
  std::string TokenBytes(std::string token, bool*) const override {
    return absl::StrReplaceAll(token, {{pattern_, content_}});
  }

 private:
  const std::string pattern_;
  const std::string content_;
};

// Runs of `<0xXX>` tokens become their bytes' text, ill-formed parts
// replaced as Utf8Lossy does. This is the JS port's behaviour (the Rust
// library turns a whole run with any bad byte into one U+FFFD per byte); it
// keeps the valid characters of a run, and a character still incomplete at
// the end of a stream shows as a single trailing U+FFFD that the incremental
// detokenizer can hold back.
class ByteFallbackDecoder : public Decoder {
 public:
  std::vector<std::string> DecodeChain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string run;
    auto flush = [&] {
      if (run.empty()) return;
      out.push_back(Utf8Lossy(run));
      run.clear();
    };
    for (std::string& token : tokens) {
      const int byte = ByteTokenValue(token);
      if (byte >= 0) {
        run += static_cast<char>(byte);
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    return out;
  }
  std::string TokenBytes(std::string token, bool*) const override {
    const int byte = ByteTokenValue(token);
    return byte >= 0 ? std::string(1, static_cast<char>(byte)) : token;
  }

 private:
  static int HexDigit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  }
  // The byte of a "<0xXX>" token, else -1.
  static int ByteTokenValue(const std::string& token) {
    if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
    const int high = HexDigit(token[3]);
    const int low = HexDigit(token[4]);
    return high < 0 || low < 0 ? -1 : high * 16 + low;
  }
};

class FuseDecoder : public Decoder {
 public:
  std::vector<std::string> DecodeChain(std::vector<std::string> tokens) const override {
    return {absl::StrJoin(tokens, "")};
  }
  std::string TokenBytes(std::string token, bool* fused) const override {
    *fused = true;
    return token;
  }
};

// Removes up to `start` leading and `stop` trailing copies of `content`
// (one character) from every token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, int start, int stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  std::vector<std::string> DecodeChain(std::vector<std::string> tokens) const override {
    for (std::string& token : tokens) {
      for (int i = 0; i < start_ && token.compare(0, content_.size(), content_) == 0; ++i) {
        token.erase(0, content_.size());
      }
      for (int i = 0; i < stop_ && token.size() >= content_.size() &&
                      token.compare(token.size() - content_.size(), content_.size(), content_) == 0;
           ++i) {
        token.resize(token.size() - content_.size());
      }
    }
    return tokens;
  }
  // After Fuse, Strip trims the text's ends only, not a token inside it.
  std::string TokenBytes(std::string token, bool* fused) const override {
    if (*fused) return token;
    return DecodeChain({std::move(token)})[0];
  }

 private:
  const std::string content_;
  const int start_;
  const int stop_;
};

// The replacement character back to spaces; the first token loses the space
// that the pre-tokenizer prepended.
class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  std::vector<std::string> DecodeChain(std::vector<std::string> tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = absl::StrReplaceAll(tokens[i], {{replacement_, " "}});
      if (i == 0 && strip_first_ && !tokens[i].empty() && tokens[i][0] == ' ') {
        tokens[i].erase(0, 1);
      }
    }
    return tokens;
  }
  // Inside a text no space is stripped.
  std::string TokenBytes(std::string token, bool*) const override {
    return absl::StrReplaceAll(token, {{replacement_, " "}});
  }

 private:
  const std::string replacement_;
  const bool strip_first_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  std::vector<std::string> DecodeChain(std::vector<std::string> tokens) const override {
    for (const auto& step : steps_) tokens = step->DecodeChain(std::move(tokens));
    return tokens;
  }
  std::string TokenBytes(std::string token, bool* fused) const override {
    for (const auto& step : steps_) token = step->TokenBytes(std::move(token), fused);
    return token;
  }

 private:
  const std::vector<std::unique_ptr<Decoder>> steps_;
};

bool IsString(const json& spec, const char* key) {
  return spec.contains(key) && spec[key].is_string();
}

absl::StatusOr<std::unique_ptr<Decoder>> ParseSequence(const json& spec) {
  std::vector<std::unique_ptr<Decoder>> steps;
  for (const json& step : spec["decoders"]) {
    absl::StatusOr<std::unique_ptr<Decoder>> parsed = ParseDecoder(step);
    if (!parsed.ok()) return parsed.status();
    if (*parsed != nullptr) steps.push_back(*std::move(parsed));
  }
  return std::make_unique<SequenceDecoder>(std::move(steps));
}

// Strip's `start` or `stop` (absent: 0): how many copies of its content to
// trim. Checked as an integer before it is converted: json's get<int> of a
// float outside int's range is undefined behaviour (found by the
// tokenizer_json fuzzer, `regression-strip-start-out-of-range`).
absl::StatusOr<int> StripCount(const json& spec, const char* key) {
  if (!spec.contains(key)) return 0;
  const json& count = spec[key];
  if (!count.is_number_integer() || count.get<int64_t>() < 0 || count.get<int64_t>() > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.json: decoder Strip's ", key, " must be an integer >= 0"));
  }
  return static_cast<int>(count.get<int64_t>());
}

absl::StatusOr<std::unique_ptr<Decoder>> ParseStrip(const json& spec) {
  absl::StatusOr<int> start = StripCount(spec, "start");
  if (!start.ok()) return start.status();
  absl::StatusOr<int> stop = StripCount(spec, "stop");
  if (!stop.ok()) return stop.status();
  return std::make_unique<StripDecoder>(spec["content"].get<std::string>(), *start, *stop);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const json& spec) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.is_object() ? spec.value("type", "") : "";
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Replace" && spec.contains("pattern") && IsString(spec["pattern"], "String") &&
      IsString(spec, "content")) {
    return std::make_unique<ReplaceDecoder>(spec["pattern"]["String"].get<std::string>(),
                                            spec["content"].get<std::string>());
  }
  if (type == "Strip" && IsString(spec, "content")) return ParseStrip(spec);
  if (type == "Metaspace") {
    std::string scheme = spec.value("prepend_scheme", "");
    if (scheme.empty()) scheme = spec.value("add_prefix_space", true) ? "always" : "never";
    return std::make_unique<MetaspaceDecoder>(spec.value("replacement", "\xE2\x96\x81"),
                                              scheme != "never");
  }
  if (type == "Sequence" && spec.contains("decoders") && spec["decoders"].is_array()) {
    return ParseSequence(spec);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tokenizer.json: unsupported decoder ", spec.dump().substr(0, 200)));
}

}  // namespace pagoda
