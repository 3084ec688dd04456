#ifndef PAGODA_SCHEDULER_SPEC_DECODE_METRICS_H_
#define PAGODA_SCHEDULER_SPEC_DECODE_METRICS_H_

// Speculative decoding's counters under vLLM's names
// (vllm:spec_decode_num_drafts_total, ..._num_draft_tokens_total,
// ..._num_accepted_tokens_total and ..._num_accepted_tokens_per_pos_total
// {position="0".."k-1"}, as vllm/v1/spec_decode/metrics.py registers them)
// and their pagoda_spec_decode_* twins, labelled model_name. Registered only
// when speculation is on, as vLLM does. Fed from the engine's snapshot.

#include <memory>
#include <string>

#include "scheduler/engine/engine_stats.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace pagoda::scheduler {

class SpecDecodeMetrics {
 public:
  // One per-position series for each of the `num_speculative_tokens`
  // positions; the vllm: families only with `vllm_names`.
  SpecDecodeMetrics(prometheus::Registry& registry, const std::string& model_name,
                    int num_speculative_tokens, bool vllm_names);
  ~SpecDecodeMetrics();
  SpecDecodeMetrics(const SpecDecodeMetrics&) = delete;
  SpecDecodeMetrics& operator=(const SpecDecodeMetrics&) = delete;

  // The counters catch up with the engine's totals.
  void OnStep(const SpecDecodeTotals& totals);

 private:
  struct Family;
  std::unique_ptr<Family> pagoda_;
  std::unique_ptr<Family> vllm_;  // Null without vLLM names.
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_SPEC_DECODE_METRICS_H_
