#include "scheduler/startup/kv_events_wiring.h"

#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "glog/logging.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace pagoda::scheduler {
namespace {

std::string DefaultTopic(const std::string& model_name) {
  std::string pod;
  if (const char* ip = std::getenv("POD_IP"); ip != nullptr && *ip != '\0') pod = ip;
  if (pod.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) == 0) pod = host;
  }
  return absl::StrCat("kv@", pod, "@", model_name);
}

// /kv_cache/block_hashes: one gauge series per cached block hash, read from
// the engine at each request.
class BlockHashPage : public prometheus::Collectable {
 public:
  explicit BlockHashPage(Engine* engine) : engine_(engine) {}
  ~BlockHashPage() override { Detach(); }
  void Detach() {
    absl::MutexLock lock(&mu_);
    engine_ = nullptr;
  }
  std::vector<prometheus::MetricFamily> Collect() const override {
    absl::MutexLock lock(&mu_);
    if (engine_ == nullptr) return {};
    std::optional<std::vector<uint64_t>> hashes = engine_->CachedBlockHashes(absl::Seconds(5));
    if (!hashes.has_value()) return {};
    prometheus::MetricFamily family;
    family.name = "pagoda_kv_cached_block";
    family.help = "1 for each block hash the prefix cache can serve hits from.";
    family.type = prometheus::MetricType::Gauge;
    family.metric.reserve(hashes->size());
    for (uint64_t hash : *hashes) {
      prometheus::ClientMetric metric;
      metric.label.push_back({"block_hash", absl::StrCat(hash)});
      metric.gauge.value = 1;
      family.metric.push_back(std::move(metric));
    }
    return {std::move(family)};
  }

 private:
  mutable absl::Mutex mu_;
  Engine* engine_ ABSL_GUARDED_BY(mu_);
};

// Keeps the page registered (the exposer holds it weakly) until destroyed.
class PageHolder : public KvEventsAttachment {
 public:
  explicit PageHolder(std::shared_ptr<BlockHashPage> page) : page_(std::move(page)) {}
  ~PageHolder() override { page_->Detach(); }

 private:
  std::shared_ptr<BlockHashPage> page_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<KvEventPublisher>> StartKvEventPublisher(
    const KvEventOptions& events, const std::string& model_name,
    const lora::LoraRegistry* lora_registry) {
  if (events.endpoint.empty()) return nullptr;
  KvEventPublisherOptions options;
  options.endpoint = events.endpoint;
  options.replay_endpoint = events.replay_endpoint;
  options.topic = events.topic.empty() ? DefaultTopic(model_name) : events.topic;
  options.max_queued_batches = events.queue_batches;
  options.replay_buffer_batches = events.replay_buffer;
  options.send_high_water_mark = events.send_high_water_mark;
  if (lora_registry != nullptr) {
    options.lora_name_of = [lora_registry](int lora_id) {
      absl::StatusOr<lora::LoraEntry> entry = lora_registry->FindById(lora_id);
      return entry.ok() ? entry->spec.name : std::string();
    };
  }
  absl::StatusOr<std::unique_ptr<KvEventPublisher>> publisher =
      KvEventPublisher::Start(std::move(options));
  if (!publisher.ok()) return publisher.status();
  LOG(INFO) << "KV events: publishing on " << events.endpoint;
  if (!(*publisher)->replay_endpoint().empty()) {
    std::cout << "PAGODA_KV_EVENTS_REPLAY_ENDPOINT " << (*publisher)->replay_endpoint()
              << std::endl;
  }
  return publisher;
}

std::unique_ptr<KvEventsAttachment> AttachKvEvents(Engine& engine, KvEventPublisher* publisher,
                                                   ServerMetrics* metrics) {
  if (publisher == nullptr) return nullptr;
  engine.SetKvEventSink(publisher);
  if (metrics == nullptr) return nullptr;
  auto page = std::make_shared<BlockHashPage>(&engine);
  metrics->RegisterPage(page, "/kv_cache/block_hashes");
  return std::make_unique<PageHolder>(std::move(page));
}

}  // namespace pagoda::scheduler
