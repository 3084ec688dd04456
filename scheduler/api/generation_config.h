#ifndef PAGODA_SCHEDULER_API_GENERATION_CONFIG_H_
#define PAGODA_SCHEDULER_API_GENERATION_CONFIG_H_

// --generation-config, as vLLM's: the sampling defaults a request's unset
// fields take (RequestValidator, SamplingDefaults).

#include <string>

#include "absl/status/statusor.h"
#include "scheduler/api/request_validation.h"

namespace pagoda::scheduler {

// `mode` "vllm": no defaults (the file is ignored). "auto": temperature,
// top_p, top_k, min_p, repetition_penalty and max_new_tokens from
// `model_dir`'s generation_config.json, those it sets (none when there is no
// file). Anything else is a directory whose generation_config.json must
// exist. `override_json`, vLLM's --override-generation-config (empty: none),
// is then laid over them as vLLM's dict update is: each of the six fields it
// sets replaces the file's (null removes it); other keys are left unread, as
// vLLM leaves them. max_new_tokens is the default max_tokens; as in vLLM it
// is also every request's cap (max_tokens_cap) when it comes from a
// directory's file or from the override. INVALID_ARGUMENT for unreadable
// JSON or a field of the wrong type or range, naming the file or the flag.
absl::StatusOr<SamplingDefaults> LoadSamplingDefaults(const std::string& mode,
                                                      const std::string& model_dir,
                                                      const std::string& override_json = "");

// The override alone (no file read): LoadSamplingDefaults' refusals of it,
// for the flags' check before anything starts.
absl::Status CheckSamplingOverride(const std::string& override_json);

// "temperature=0.7 top_p=0.8 ..." for the start-up log; "none" when empty.
std::string DescribeSamplingDefaults(const SamplingDefaults& defaults);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_GENERATION_CONFIG_H_
