#ifndef PAGODA_COMMON_JSON_FLAG_KEYS_H_
#define PAGODA_COMMON_JSON_FLAG_KEYS_H_

// vLLM's second spelling of a JSON flag: one key per argument. These are the
// same command line:
//   --speculative-config '{"method": "ngram", "num_speculative_tokens": 4}'
//   --speculative-config.method ngram --speculative_config.num_speculative_tokens=4
// and "KEY+ a,b" appends the strings "a" and "b" to the list at KEY. Read
// from vLLM's FlexibleArgumentParser (vllm/utils/argparse_utils.py): the
// value is JSON when it parses as JSON (4, true, [1, 2]), else an integer
// with a k/M/G/T suffix (1k = 1000, 1K = 1024), else the text itself;
// nested keys make nested objects (--NAME.a.b 1 is {"a": {"b": 1}}); a key
// given again replaces the earlier value, except that objects merge and
// lists concatenate. Where vLLM would let a later whole-JSON argument drop
// the keys given one by one (or the other way round), mixing the two
// spellings of one flag is refused here instead. Written here because
// Abseil's flags, which read the result, have no such spelling.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace pagoda {

struct GatheredJsonFlags {
  // The arguments with each JSON flag's keys replaced, where the first of
  // them stood, by one "--NAME=JSON" (NAME underscored); others untouched.
  std::vector<std::string> args;
  // "NAME.KEY" for each key given more than once (the last value counts).
  std::vector<std::string> repeated_keys;
};

// Gathers the keys of the JSON flags named in `json_flags` (underscored
// names, "speculative_config"). Stops at "--". INVALID_ARGUMENT, naming the
// flag, for a dotted key on a flag not in `json_flags`, a key with no value
// after it, an empty key, or a flag given both whole and by key.
absl::StatusOr<GatheredJsonFlags> GatherJsonFlagKeys(std::vector<std::string> args,
                                                     absl::Span<const std::string> json_flags);

}  // namespace pagoda

#endif  // PAGODA_COMMON_JSON_FLAG_KEYS_H_
