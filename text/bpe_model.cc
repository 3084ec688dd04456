#include "text/bpe_model.h"

#include <queue>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "text/utf8.h"

namespace pagoda {
namespace {

using nlohmann::json;

bool IsNullOrEmpty(const json& model, const char* key) {
  return !model.contains(key) || model[key].is_null() ||
         (model[key].is_string() && model[key].get<std::string>().empty());
}

// A merge rule as "left right" (older files) or ["left", "right"].
absl::StatusOr<std::pair<std::string, std::string>> ParseMerge(const json& merge) {
  if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
    return std::make_pair(merge[0].get<std::string>(), merge[1].get<std::string>());
  }
  if (merge.is_string()) {
    const std::string text = merge.get<std::string>();
    const size_t space = text.find(' ', 1);
    if (space != std::string::npos)
      return std::make_pair(text.substr(0, space), text.substr(space + 1));
  }
  return absl::InvalidArgumentError(absl::StrCat("bad BPE merge ", merge.dump()));
}

}  // namespace

absl::StatusOr<BpeModel> BpeModel::Create(const json& model) {
  if (!model.is_object() || model.value("type", "") != "BPE") {
    return absl::InvalidArgumentError("tokenizer.json: only the BPE model is supported");
  }
  if (!model.contains("dropout") || !model["dropout"].is_null()) {
    if (model.contains("dropout") && !model["dropout"].is_null()) {
      return absl::InvalidArgumentError("tokenizer.json: BPE dropout is not supported");
    }
  }
  if (!IsNullOrEmpty(model, "continuing_subword_prefix") ||
      !IsNullOrEmpty(model, "end_of_word_suffix")) {
    return absl::InvalidArgumentError(
        "tokenizer.json: BPE continuing_subword_prefix / end_of_word_suffix are not supported");
  }
  if (!model.contains("vocab") || !model["vocab"].is_object() || !model.contains("merges") ||
      !model["merges"].is_array()) {
    return absl::InvalidArgumentError("tokenizer.json: BPE model needs vocab and merges");
  }
  BpeModel out;
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: bad id for ", token));
    }
    out.vocab_[token] = id.get<int>();
  }
  const json& merges = model["merges"];
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    absl::StatusOr<std::pair<std::string, std::string>> merge = ParseMerge(merges[rank]);
    if (!merge.ok()) return merge.status();
    const int left = out.TokenToId(merge->first);
    const int right = out.TokenToId(merge->second);
    const int merged = out.TokenToId(merge->first + merge->second);
    if (left < 0 || right < 0 || merged < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: merge ", merges[rank].dump(), " uses unknown tokens"));
    }
    // The first (lowest-ranked) rule for a pair wins, as in the library.
    out.merges_.try_emplace(PairKey(left, right), Merge{static_cast<int>(rank), merged});
  }
  for (int byte = 0; byte < 256; ++byte) {
    out.byte_token_ids_[byte] = out.TokenToId(absl::StrFormat("<0x%02X>", byte));
  }
  if (!IsNullOrEmpty(model, "unk_token")) {
    if (!model["unk_token"].is_string()) {
      return absl::InvalidArgumentError("tokenizer.json: unk_token must be a string");
    }
    out.unk_id_ = out.TokenToId(model["unk_token"].get<std::string>());
  }
  out.byte_fallback_ = model.value("byte_fallback", false);
  out.fuse_unk_ = model.value("fuse_unk", false);
  out.ignore_merges_ = model.value("ignore_merges", false);
  return out;
}

int BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(absl::string_view(token.data(), token.size()));
  return it == vocab_.end() ? -1 : it->second;
}

void BpeModel::InitialSymbols(std::string_view word, std::vector<int>* symbols) const {
  bool last_was_unk = false;
  for (size_t pos = 0; pos < word.size();) {
    size_t length = Utf8CharLength(word, pos);
    if (length == 0) length = 1;  // Callers pass valid UTF-8; stay safe anyway.
    const std::string_view character = word.substr(pos, length);
    pos += length;
    const int id = TokenToId(character);
    if (id >= 0) {
      symbols->push_back(id);
      last_was_unk = false;
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes_known = true;
      for (char byte : character)
        all_bytes_known &= byte_token_ids_[static_cast<uint8_t>(byte)] >= 0;
      if (all_bytes_known) {
        for (char byte : character) symbols->push_back(byte_token_ids_[static_cast<uint8_t>(byte)]);
        last_was_unk = false;
        continue;
      }
    }
    if (unk_id_ < 0) continue;
    if (!(fuse_unk_ && last_was_unk)) symbols->push_back(unk_id_);
    last_was_unk = true;
  }
}

void BpeModel::ApplyMerges(std::vector<int>* symbols) const {
  const int count = static_cast<int>(symbols->size());
  if (count < 2) return;
  std::vector<int> next(count), prev(count);
  std::vector<bool> alive(count, true);
  for (int i = 0; i < count; ++i) {
    next[i] = i + 1 < count ? i + 1 : -1;
    prev[i] = i - 1;
  }
  // (rank, left position, right id at push time): the right id tells a stale
  // candidate (its right neighbour merged since) from a live one.
  using Candidate = std::tuple<int, int, int>;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push = [&](int left) {
    if (left < 0 || next[left] < 0) return;
    auto it = merges_.find(PairKey((*symbols)[left], (*symbols)[next[left]]));
    if (it != merges_.end()) queue.emplace(it->second.rank, left, (*symbols)[next[left]]);
  };
  for (int i = 0; i + 1 < count; ++i) push(i);
  while (!queue.empty()) {
    const auto [rank, left, right_id] = queue.top();
    queue.pop();
    const int right = alive[left] ? next[left] : -1;
    if (right < 0 || (*symbols)[right] != right_id) continue;
    auto it = merges_.find(PairKey((*symbols)[left], right_id));
    if (it == merges_.end() || it->second.rank != rank) continue;
    (*symbols)[left] = it->second.merged_id;
    alive[right] = false;
    next[left] = next[right];
    if (next[right] >= 0) prev[next[right]] = left;
    push(prev[left]);
    push(left);
  }
  std::vector<int> merged;
  for (int i = 0; i >= 0; i = next[i]) merged.push_back((*symbols)[i]);
  symbols->swap(merged);
}

void BpeModel::Tokenize(std::string_view word, std::vector<int>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const int whole = TokenToId(word);
    if (whole >= 0) {
      ids->push_back(whole);
      return;
    }
  }
  std::vector<int> symbols;
  InitialSymbols(word, &symbols);
  ApplyMerges(&symbols);
  ids->insert(ids->end(), symbols.begin(), symbols.end());
}

}  // namespace pagoda
