#ifndef PAGODA_SCHEDULER_SPEC_SPECULATIVE_CONFIG_H_
#define PAGODA_SCHEDULER_SPEC_SPECULATIVE_CONFIG_H_

// --speculative-config: vLLM's JSON object, parsed and checked once at
// start, into the settings the scheduler and the draft proposers read.

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pagoda::scheduler {

enum class SpeculativeMethod { kNgram, kDraftModel, kEagle, kEagle3 };

// The method's name as vLLM spells it ("ngram", "draft_model", "eagle",
// "eagle3").
absl::string_view SpeculativeMethodName(SpeculativeMethod method);

// The longest n-gram prompt lookup may match: each step scans the
// sequence's tokens comparing up to this many per position.
inline constexpr int kMaxPromptLookup = 64;

// disable_by_batch_size when the config leaves it out (vLLM has none: it
// always proposes). Measured end to end on the CPU worker
// (bench/server/bench_spec_sweep.sh, docs/speculative-decoding.md): with
// about half the drafts right, prompt lookup at k = 4 gave 1.7x plain
// decoding's tokens/s at batch 1 and DEFAULT_RESULT, and lost at batch 8
// (0.9x); at batch 32 no k paid. Above the default a step is compute bound
// and its k extra rows a sequence cost more than the drafts save. A config
// that gives the key keeps its value (at least --max-num-seqs: never off).
inline constexpr int kDefaultDisableByBatchSize = 4;

// One entry of vLLM's num_speculative_tokens_per_batch_size: a step of
// `first`..`last` running sequences proposes up to `k` drafts a sequence.
struct BatchSizeDrafts {
  int first = 0;
  int last = 0;
  int k = 0;
  bool operator==(const BatchSizeDrafts&) const = default;
};

// Entries a num_speculative_tokens_per_batch_size may list: far above any
// useful schedule; bounds the lookup each step makes.
inline constexpr int kMaxBatchSizeScheduleEntries = 256;

struct SpeculativeConfig {
  SpeculativeMethod method = SpeculativeMethod::kNgram;
  // The draft model or EAGLE head directory; empty for ngram.
  std::string model;
  // k: drafts per sequence per step, in [1, kMaxSpeculativeTokens].
  int num_speculative_tokens = 0;
  // ngram only: n-gram lengths tried, 1 <= min <= max <= kMaxPromptLookup
  // (vLLM's defaults: both 5 when neither is given, else the one given).
  int prompt_lookup_min = 0;
  int prompt_lookup_max = 0;
  // Above this many running sequences no drafts are proposed (decode turns
  // compute bound); unset: always propose. At least 2, as vLLM.
  // ParseSpeculativeConfig sets kDefaultDisableByBatchSize when the key is
  // left out.
  std::optional<int> disable_by_batch_size;
  // vLLM's num_speculative_tokens_per_batch_size (dynamic speculative
  // decoding): k by the step's batch size, sorted by `first`, the first
  // starting at 1; empty when not given. With it, disable_by_batch_size is
  // unset (the schedule covers every batch size).
  std::vector<BatchSizeDrafts> per_batch_size;
  // Draft model or EAGLE head: tensor-parallel size, 1 or the target's
  // (CheckAgainstTarget); unset: the target's (DraftTensorParallelSize).
  std::optional<int> draft_tensor_parallel_size;
  // Draft model or EAGLE head: vLLM's max_model_len key, the proposer's
  // max_model_len when given (at most its positions and --max-model-len:
  // CheckDraftModelFiles), so that sequences past it stop drafting.
  std::optional<int> max_model_len;
  // draft_model only: vLLM's quantization key, the draft checkpoint's
  // method (common/quantization_methods.h; "fp8" also quantizes a dense
  // draft at load), checked by the worker as --quantization is for the
  // target. "": the draft checkpoint's own ("auto" is stored so).
  std::string quantization;
  // The proposer's max_model_len, which CheckDraftModelFiles sets at start:
  // max_model_len when given; else, for a draft model, its config.json's
  // positions, at most --max-model-len (common/draft_model_positions.h). A
  // row whose proposals would pass it verifies none. Unset: the target's
  // (ngram, and an EAGLE head without the key: raised to the target's).
  std::optional<int> draft_max_len;
};

// Parses `json`, vLLM's --speculative-config object. Keys: method
// (ngram | draft_model | eagle | eagle3), model, num_speculative_tokens,
// prompt_lookup_max, prompt_lookup_min, disable_by_batch_size,
// num_speculative_tokens_per_batch_size, draft_tensor_parallel_size,
// max_model_len (not with ngram), quantization (draft_model only). As
// vLLM: without method, a model of "ngram" or "[ngram]" means ngram, a model
// whose name holds "eagle-" EAGLE, else one whose name holds "eagle3"
// EAGLE-3, any other a draft model. INVALID_ARGUMENT, one line
// naming the problem, for: text that is not a JSON object, an unknown key
// or method, a value of the wrong type (every count is a JSON integer), k
// outside [1, kMaxSpeculativeTokens], prompt lookup bounds outside
// [1, kMaxPromptLookup] or min > max, prompt lookup keys for a method that
// does not look up, a model for ngram or none for the others,
// disable_by_batch_size below 2, draft_tensor_parallel_size below 1 or
// given for ngram; a num_speculative_tokens_per_batch_size that is not a
// non-empty list of [first, last, k] integers (vLLM's 5-item form with
// context ranges is not served), with first or last below 1, first above
// last, k below 0, ranges that overlap or whose lowest does not start at 1
// (vLLM's checks), more than kMaxBatchSizeScheduleEntries entries, or given
// beside disable_by_batch_size. disable_by_batch_size left out is
// kDefaultDisableByBatchSize, unless a schedule is given.
absl::StatusOr<SpeculativeConfig> ParseSpeculativeConfig(absl::string_view json);

// The drafts a sequence may carry in a step of `batch_size` running
// sequences: num_speculative_tokens, or with a schedule the k of the last
// entry whose first is at most `batch_size` (a batch size between two
// ranges, or past the last, takes the range below it, as vLLM's lookup
// does), at most num_speculative_tokens (vLLM clamps it too).
int SpeculativeTokensFor(const SpeculativeConfig& config, int batch_size);

// The checks that need the target: draft_tensor_parallel_size must be 1 or
// `tensor_parallel_size`. INVALID_ARGUMENT naming both.
absl::Status CheckAgainstTarget(const SpeculativeConfig& config, int tensor_parallel_size);

// The draft's tensor-parallel size: the one given; else the target's
// `tensor_parallel_size`, for a draft model and an EAGLE head alike (vLLM's
// default, and in vLLM the only size either may have).
int DraftTensorParallelSize(const SpeculativeConfig& config, int tensor_parallel_size);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_SPEC_SPECULATIVE_CONFIG_H_
