#ifndef PAGODA_SCHEDULER_API_GENERATION_CONFIG_H_
#define PAGODA_SCHEDULER_API_GENERATION_CONFIG_H_

// --generation-config, as vLLM's: the sampling defaults a request's unset
// fields take (RequestValidator, SamplingDefaults).

#include <string>

#include "absl/status/statusor.h"
#include "scheduler/api/request_validation.h"

namespace pagoda::scheduler {

// `mode` "vllm": no defaults (the file is ignored). "auto": temperature,
// top_p, top_k, min_p and repetition_penalty from `model_dir`'s
// generation_config.json, those it sets (none when there is no file).
// Anything else is a directory whose generation_config.json must exist.
// INVALID_ARGUMENT for unreadable JSON or a field of the wrong type.
absl::StatusOr<SamplingDefaults> LoadSamplingDefaults(const std::string& mode,
                                                      const std::string& model_dir);

// "temperature=0.7 top_p=0.8 ..." for the start-up log; "none" when empty.
std::string DescribeSamplingDefaults(const SamplingDefaults& defaults);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_GENERATION_CONFIG_H_
