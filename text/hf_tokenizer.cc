#include "text/hf_tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "text/bpe_model.h"
#include "text/hf_text_steps.h"
#include "text/utf8.h"

namespace pagoda {

using nlohmann::json;

// The types of HfTokenizer::Parts's members: a class with external linkage
// may not hold a member of an unnamed namespace's type (GCC warns,
// -Wsubobject-linkage).
namespace hf_tokenizer_parts {

struct AddedToken {
  std::string content;
  int id = 0;
  bool special = false;
  bool lstrip = false;  // The match takes the whitespace before it.
  bool rstrip = false;  // The match takes the whitespace after it.
  bool single_word = false;
};

// One added token found in the text: [begin, end) is the span it consumes.
struct AddedMatch {
  size_t begin = 0;
  size_t end = 0;
  int id = -1;
};

}  // namespace hf_tokenizer_parts

using hf_tokenizer_parts::AddedMatch;
using hf_tokenizer_parts::AddedToken;

namespace {

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool IsWordByte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         (static_cast<unsigned char>(c) >= 0x80);
}

}  // namespace

struct HfTokenizer::Parts {
  BpeModel model;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Decoder> decoder;
  std::vector<AddedToken> added;
  std::vector<int> added_by_first_byte[256];  // Indices into `added`, longest first.
  std::vector<std::string> id_to_token;
  int vocab_size = 0;
  int bos_to_add = -1;

  // The leftmost (then longest) added token in text[from..], if any.
  bool FindAdded(const std::string& text, size_t from, AddedMatch* match) const;
};

bool HfTokenizer::Parts::FindAdded(const std::string& text, size_t from, AddedMatch* match) const {
  for (size_t pos = from; pos < text.size(); ++pos) {
    for (int index : added_by_first_byte[static_cast<uint8_t>(text[pos])]) {
      const AddedToken& token = added[index];
      if (text.compare(pos, token.content.size(), token.content) != 0) continue;
      size_t begin = pos;
      size_t end = pos + token.content.size();
      if (token.single_word && ((begin > 0 && IsWordByte(text[begin - 1])) ||
                                (end < text.size() && IsWordByte(text[end])))) {
        continue;
      }
      if (token.lstrip) {
        while (begin > from && IsAsciiSpace(text[begin - 1])) --begin;
      }
      if (token.rstrip) {
        while (end < text.size() && IsAsciiSpace(text[end])) ++end;
      }
      *match = AddedMatch{begin, end, token.id};
      return true;
    }
  }
  return false;
}

namespace {

absl::Status ParseAddedTokens(const json& root, HfTokenizer::Parts* parts);

// The id of the special token that a TemplateProcessing post-processor (or
// one inside a Sequence) puts first in a single sequence, or -1.
int LeadingSpecialToken(const json& processor) {
  if (!processor.is_object()) return -1;
  if (processor.value("type", "") == "Sequence" && processor.contains("processors") &&
      processor["processors"].is_array()) {
    for (const json& step : processor["processors"]) {
      const int id = LeadingSpecialToken(step);
      if (id >= 0) return id;
    }
    return -1;
  }
  if (processor.value("type", "") != "TemplateProcessing" || !processor.contains("single") ||
      !processor["single"].is_array() || processor["single"].empty()) {
    return -1;
  }
  const json& first = processor["single"][0];
  if (!first.is_object() || !first.contains("SpecialToken")) return -1;
  const std::string name = first["SpecialToken"].value("id", "");
  const json special = processor.value("special_tokens", json::object());
  if (!special.contains(name) || !special[name].contains("ids") ||
      !special[name]["ids"].is_array() || special[name]["ids"].size() != 1 ||
      !special[name]["ids"][0].is_number_integer() || special[name]["ids"][0].get<int64_t>() < 0 ||
      special[name]["ids"][0].get<int64_t>() > INT32_MAX) {
    return -1;
  }
  return static_cast<int>(special[name]["ids"][0].get<int64_t>());
}

}  // namespace

HfTokenizer::HfTokenizer(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}
HfTokenizer::~HfTokenizer() = default;

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::FromFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  absl::StatusOr<std::unique_ptr<HfTokenizer>> tokenizer = FromJson(buffer.str());
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat(path, ": ", tokenizer.status().message()));
  }
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::FromJson(const std::string& json_text) {
  const json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError("tokenizer.json is not a JSON object");
  }
  // The parts are read with nlohmann's accessors, which throw on a value of
  // another type than the file format's (a "type" that is a number, a
  // "special" that is a string...): such a file is refused like any other
  // malformed one, never a crash of the server that loads it.
  try {
    return FromParsedJson(root);
  } catch (const json::exception& error) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.json has a value of the wrong type: ", error.what()));
  }
}

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::FromParsedJson(const json& root) {
  auto parts = std::make_unique<Parts>();
  absl::StatusOr<BpeModel> model = BpeModel::Create(root.value("model", json()));
  if (!model.ok()) return model.status();
  parts->model = *std::move(model);
  auto normalizer = ParseNormalizer(root.value("normalizer", json()));
  if (!normalizer.ok()) return normalizer.status();
  parts->normalizer = *std::move(normalizer);
  auto pre_tokenizer = ParsePreTokenizer(root.value("pre_tokenizer", json()));
  if (!pre_tokenizer.ok()) return pre_tokenizer.status();
  parts->pre_tokenizer = *std::move(pre_tokenizer);
  auto decoder = ParseDecoder(root.value("decoder", json()));
  if (!decoder.ok()) return decoder.status();
  parts->decoder = *std::move(decoder);
  absl::Status added = ParseAddedTokens(root, parts.get());
  if (!added.ok()) return added;
  parts->bos_to_add = LeadingSpecialToken(root.value("post_processor", json()));
  if (parts->bos_to_add >= parts->vocab_size) {
    return absl::InvalidArgumentError("post_processor names a token id outside the vocabulary");
  }
  return std::unique_ptr<HfTokenizer>(new HfTokenizer(std::move(parts)));
}

namespace {

absl::Status ParseAddedTokens(const json& root, HfTokenizer::Parts* parts) {
  int max_id = -1;
  for (const auto& [token, id] : parts->model.vocab()) max_id = std::max(max_id, id);
  const json added = root.value("added_tokens", json::array());
  if (!added.is_array()) return absl::InvalidArgumentError("added_tokens must be an array");
  for (const json& entry : added) {
    if (!entry.is_object() || !entry.contains("id") || !entry["id"].is_number_integer() ||
        !entry.contains("content") || !entry["content"].is_string() ||
        entry["content"].get<std::string>().empty() || entry["id"].get<int64_t>() < 0 ||
        entry["id"].get<int64_t>() > INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat("bad added token ", entry.dump()));
    }
    AddedToken token;
    token.content = entry["content"].get<std::string>();
    token.id = entry["id"].get<int>();
    token.special = entry.value("special", false);
    token.lstrip = entry.value("lstrip", false);
    token.rstrip = entry.value("rstrip", false);
    token.single_word = entry.value("single_word", false);
    max_id = std::max(max_id, token.id);
    parts->added.push_back(std::move(token));
  }
  // Bounded by the file's own ids, which a hostile file could make huge.
  if (max_id >= (1 << 24)) return absl::InvalidArgumentError("token ids above 2^24");
  parts->vocab_size = max_id + 1;
  parts->id_to_token.assign(parts->vocab_size, std::string());
  for (const auto& [token, id] : parts->model.vocab()) parts->id_to_token[id] = token;
  for (size_t i = 0; i < parts->added.size(); ++i) {
    const AddedToken& token = parts->added[i];
    parts->id_to_token[token.id] = token.content;
    parts->added_by_first_byte[static_cast<uint8_t>(token.content[0])].push_back(
        static_cast<int>(i));
  }
  for (std::vector<int>& bucket : parts->added_by_first_byte) {
    std::stable_sort(bucket.begin(), bucket.end(), [parts](int a, int b) {
      return parts->added[a].content.size() > parts->added[b].content.size();
    });
  }
  return absl::OkStatus();
}

}  // namespace

void HfTokenizer::EncodeSection(const std::string& text, bool first_section,
                                std::vector<int>* ids) const {
  if (text.empty()) return;
  std::string normalized =
      parts_->normalizer != nullptr ? parts_->normalizer->Normalize(text) : text;
  std::vector<std::string> pieces = {std::move(normalized)};
  if (parts_->pre_tokenizer != nullptr) parts_->pre_tokenizer->Split(&pieces, first_section);
  for (const std::string& piece : pieces) parts_->model.Tokenize(piece, ids);
}

absl::StatusOr<std::vector<int>> HfTokenizer::Encode(const std::string& text) const {
  if (!IsValidUtf8(text)) return absl::InvalidArgumentError("text is not valid UTF-8");
  std::vector<int> ids;
  size_t pos = 0;
  AddedMatch match;
  while (parts_->FindAdded(text, pos, &match)) {
    EncodeSection(text.substr(pos, match.begin - pos), pos == 0, &ids);
    ids.push_back(match.id);
    pos = match.end;
  }
  EncodeSection(text.substr(pos), pos == 0, &ids);
  return ids;
}

absl::StatusOr<std::string> HfTokenizer::Decode(const std::vector<int>& ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int id : ids) {
    if (id < 0 || id >= parts_->vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer decode: token id ", id,
                                                     " is outside [0, ", parts_->vocab_size, ")"));
    }
    tokens.push_back(parts_->id_to_token[id]);
  }
  if (parts_->decoder != nullptr) tokens = parts_->decoder->DecodeChain(std::move(tokens));
  // Without a decoder the library joins tokens with spaces.
  const std::string text = absl::StrJoin(tokens, parts_->decoder != nullptr ? "" : " ");
  return IsValidUtf8(text) ? text : Utf8Lossy(text);
}

int HfTokenizer::vocab_size() const { return parts_->vocab_size; }

absl::StatusOr<std::vector<std::optional<std::string>>> HfTokenizer::TokenBytes() const {
  if (parts_->decoder == nullptr) {
    return absl::UnimplementedError("tokenizer.json without a decoder: token bytes unknown");
  }
  std::vector<std::optional<std::string>> out(parts_->vocab_size);
  for (int id = 0; id < parts_->vocab_size; ++id) {
    bool fused = false;
    out[id] = parts_->decoder->TokenBytes(parts_->id_to_token[id], &fused);
  }
  for (const AddedToken& token : parts_->added) {
    out[token.id] = token.special ? std::nullopt : std::optional<std::string>(token.content);
  }
  return out;
}

std::optional<int> HfTokenizer::bos_token_to_add() const { return parts_->bos_to_add; }

int HfTokenizer::TokenToId(const std::string& token) const {
  for (const AddedToken& added : parts_->added) {
    if (added.content == token) return added.id;
  }
  return parts_->model.TokenToId(token);
}

}  // namespace pagoda
