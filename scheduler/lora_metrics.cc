#include "scheduler/lora_metrics.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "prometheus/gauge.h"

namespace pagoda::scheduler {

LoraRequestsInfo::LoraRequestsInfo(prometheus::Registry& registry)
    : family_(prometheus::BuildGauge()
                  .Name("vllm:lora_requests_info")
                  .Help("Running stats on lora requests.")
                  .Register(registry)) {}

void LoraRequestsInfo::Update(const LoraActivity& activity, absl::Time now) {
  prometheus::Labels labels = {{"max_lora", absl::StrCat(activity.max_loras)},
                               {"running_lora_adapters", absl::StrJoin(activity.running, ",")},
                               {"waiting_lora_adapters", absl::StrJoin(activity.waiting, ",")}};
  for (auto it = recent_.begin(); it != recent_.end(); ++it) {
    if (it->first == labels) {
      recent_.splice(recent_.begin(), recent_, it);  // Latest first.
      break;
    }
  }
  if (recent_.empty() || recent_.front().first != labels) {
    prometheus::Gauge* gauge = &family_.Add(labels);
    recent_.emplace_front(std::move(labels), gauge);
  }
  recent_.front().second->Set(absl::ToDoubleSeconds(now - absl::UnixEpoch()));
  while (recent_.size() > kMaxLoraInfoSeries) {
    family_.Remove(recent_.back().second);
    recent_.pop_back();
  }
}

}  // namespace pagoda::scheduler
