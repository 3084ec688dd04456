#include "scheduler/spec_decode_metrics.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/registry.h"

namespace pagoda::scheduler {

using prometheus::Counter;

// The four counters under one prefix ("vllm:spec_decode" or
// "pagoda_spec_decode").
struct SpecDecodeMetrics::Family {
  Counter* drafts = nullptr;
  Counter* draft_tokens = nullptr;
  Counter* accepted_tokens = nullptr;
  std::vector<Counter*> accepted_per_pos;

  Family(prometheus::Registry& r, const std::string& prefix, const std::string& model_name,
         int positions) {
    const prometheus::Labels labels = {{"model_name", model_name}};
    auto add = [&](const char* name, const char* help) {
      return &prometheus::BuildCounter()
                  .Name(absl::StrCat(prefix, name))
                  .Help(help)
                  .Register(r)
                  .Add(labels);
    };
    drafts = add("_num_drafts_total", "Sequence-steps that carried drafts.");
    draft_tokens = add("_num_draft_tokens_total", "Draft tokens proposed and verified.");
    accepted_tokens = add("_num_accepted_tokens_total", "Draft tokens accepted.");
    auto& per_pos = prometheus::BuildCounter()
                        .Name(absl::StrCat(prefix, "_num_accepted_tokens_per_pos_total"))
                        .Help("Drafts whose token at this position was accepted.")
                        .Register(r);
    for (int j = 0; j < positions; ++j) {
      accepted_per_pos.push_back(
          &per_pos.Add({{"model_name", model_name}, {"position", absl::StrCat(j)}}));
    }
  }

  void CatchUp(const SpecDecodeTotals& totals) {
    auto catch_up = [](Counter* counter, double total) {
      if (total > counter->Value()) counter->Increment(total - counter->Value());
    };
    catch_up(drafts, static_cast<double>(totals.num_drafts));
    catch_up(draft_tokens, static_cast<double>(totals.num_draft_tokens));
    catch_up(accepted_tokens, static_cast<double>(totals.num_accepted_tokens));
    for (size_t j = 0; j < accepted_per_pos.size() && j < totals.accepted_per_pos.size(); ++j) {
      catch_up(accepted_per_pos[j], static_cast<double>(totals.accepted_per_pos[j]));
    }
  }
};

SpecDecodeMetrics::SpecDecodeMetrics(prometheus::Registry& registry, const std::string& model_name,
                                     int num_speculative_tokens, bool vllm_names)
    : pagoda_(std::make_unique<Family>(registry, "pagoda_spec_decode", model_name,
                                       num_speculative_tokens)) {
  if (vllm_names) {
    vllm_ =
        std::make_unique<Family>(registry, "vllm:spec_decode", model_name, num_speculative_tokens);
  }
}

SpecDecodeMetrics::~SpecDecodeMetrics() = default;

void SpecDecodeMetrics::OnStep(const SpecDecodeTotals& totals) {
  pagoda_->CatchUp(totals);
  if (vllm_ != nullptr) vllm_->CatchUp(totals);
}

}  // namespace pagoda::scheduler
