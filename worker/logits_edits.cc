#include "worker/logits_edits.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/sampling_limits.h"

namespace pagoda::worker {
namespace {

using pagoda::worker::v1::SamplingOptions;
using IdList = google::protobuf::RepeatedField<int32_t>;

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

absl::Status CheckIds(const IdList& ids, const char* field, int vocab_size, int64_t max_size,
                      bool distinct) {
  if (ids.size() > max_size) {
    return Invalid(absl::StrCat(field, " has ", ids.size(), " entries, at most ", max_size));
  }
  absl::flat_hash_set<int32_t> seen;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size) {
      return Invalid(absl::StrCat(field, " token id ", id, " is outside [0, ", vocab_size, ")"));
    }
    if (distinct && !seen.insert(id).second) {
      return Invalid(absl::StrCat(field, " names token id ", id, " twice"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckScalars(const SamplingOptions& options) {
  for (const auto& [name, value] : {std::pair{"presence_penalty", options.presence_penalty()},
                                    std::pair{"frequency_penalty", options.frequency_penalty()}}) {
    if (!(std::abs(value) <= kMaxAbsPenalty)) {
      return Invalid(absl::StrCat(name, " ", value, " must be in [-", kMaxAbsPenalty, ", ",
                                  kMaxAbsPenalty, "]"));
    }
  }
  const float repetition = options.repetition_penalty();
  if (repetition != 0 &&
      !(repetition >= kMinRepetitionPenalty && repetition <= kMaxRepetitionPenalty)) {
    return Invalid(absl::StrCat("repetition_penalty ", repetition, " must be 0 (off) or in [",
                                kMinRepetitionPenalty, ", ", kMaxRepetitionPenalty, "]"));
  }
  if (!(options.min_p() >= 0 && options.min_p() <= 1)) {
    return Invalid(absl::StrCat("min_p ", options.min_p(), " must be in [0, 1]"));
  }
  return absl::OkStatus();
}

absl::Status CheckLogitBias(const SamplingOptions& options, int vocab_size) {
  if (options.logit_bias_token_ids_size() != options.logit_bias_values_size()) {
    return Invalid(absl::StrCat("logit_bias has ", options.logit_bias_token_ids_size(),
                                " token ids but ", options.logit_bias_values_size(), " values"));
  }
  absl::Status ids = CheckIds(options.logit_bias_token_ids(), "logit_bias", vocab_size,
                              kMaxLogitBiasEntries, /*distinct=*/true);
  if (!ids.ok()) return ids;
  for (float bias : options.logit_bias_values()) {
    if (!(std::abs(bias) <= kMaxAbsLogitBias)) {
      return Invalid(absl::StrCat("logit_bias value ", bias, " must be in [-", kMaxAbsLogitBias,
                                  ", ", kMaxAbsLogitBias, "]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckLogitsProcessing(const SamplingOptions& options, int vocab_size,
                                   int64_t max_tokens) {
  if (absl::Status scalars = CheckScalars(options); !scalars.ok()) return scalars;
  if (absl::Status bias = CheckLogitBias(options, vocab_size); !bias.ok()) return bias;
  const int64_t vocab = vocab_size;
  for (const auto& [ids, field, bound] :
       {std::tuple{&options.allowed_token_ids(), "allowed_token_ids", vocab},
        std::tuple{&options.banned_token_ids(), "banned_token_ids", vocab},
        std::tuple{&options.prompt_token_ids(), "prompt_token_ids", std::min(vocab, max_tokens)}}) {
    absl::Status status = CheckIds(*ids, field, vocab_size, bound, /*distinct=*/false);
    if (!status.ok()) return status;
  }
  if (options.output_token_ids_size() != options.output_token_counts_size()) {
    return Invalid(absl::StrCat("output_token_ids has ", options.output_token_ids_size(),
                                " entries but output_token_counts ",
                                options.output_token_counts_size()));
  }
  absl::Status output = CheckIds(options.output_token_ids(), "output_token_ids", vocab_size,
                                 std::min(vocab, max_tokens), /*distinct=*/true);
  if (!output.ok()) return output;
  for (int32_t count : options.output_token_counts()) {
    if (count < 1 || count > max_tokens) {
      return Invalid(absl::StrCat("output_token_counts entry ", count, " must be in [1, ",
                                  max_tokens, "]"));
    }
  }
  return absl::OkStatus();
}

LogitPenalties PenaltiesOf(const SamplingOptions& options) {
  return LogitPenalties{
      .repetition = options.repetition_penalty() == 0 ? 1.0f : options.repetition_penalty(),
      .frequency = options.frequency_penalty(),
      .presence = options.presence_penalty(),
      .allowed_only = options.allowed_token_ids_size() > 0};
}

void AppendLogitEdits(const SamplingOptions& options, int vocab_size,
                      std::vector<LogitEdit>* edits) {
  // Token -> index into `edits`, reset after use: merging stays linear in
  // the lists, whatever the vocabulary.
  thread_local std::vector<int32_t> slot_of;
  if (static_cast<int>(slot_of.size()) < vocab_size) slot_of.assign(vocab_size, -1);
  const size_t first = edits->size();
  auto edit = [&](int32_t token) -> LogitEdit& {
    if (slot_of[token] < 0) {
      slot_of[token] = static_cast<int32_t>(edits->size() - first);
      edits->push_back(LogitEdit{.token_id = token});
    }
    return (*edits)[first + slot_of[token]];
  };
  const LogitPenalties penalties = PenaltiesOf(options);
  const bool repetition = penalties.repetition != 1.0f;
  const bool counts = repetition || penalties.frequency != 0 || penalties.presence != 0;
  for (int32_t token : options.allowed_token_ids()) edit(token).flags |= kLogitAllowed;
  for (int32_t token : options.banned_token_ids()) edit(token).flags |= kLogitBanned;
  for (int i = 0; i < options.logit_bias_token_ids_size(); ++i) {
    edit(options.logit_bias_token_ids(i)).bias = options.logit_bias_values(i);
  }
  if (repetition) {
    for (int32_t token : options.prompt_token_ids()) edit(token).flags |= kLogitSeen;
  }
  if (counts) {
    for (int i = 0; i < options.output_token_ids_size(); ++i) {
      LogitEdit& e = edit(options.output_token_ids(i));
      e.output_count = options.output_token_counts(i);
      if (repetition) e.flags |= kLogitSeen;
    }
  }
  for (size_t i = first; i < edits->size(); ++i) slot_of[(*edits)[i].token_id] = -1;
  std::sort(edits->begin() + first, edits->end(),
            [](const LogitEdit& a, const LogitEdit& b) { return a.token_id < b.token_id; });
}

}  // namespace pagoda::worker
