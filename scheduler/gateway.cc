#include "scheduler/gateway.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "glog/logging.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

ABSL_FLAG(bool, vllm_metric_names, true,
          "Also export the gauges and counters that vLLM's consumers read under vLLM's names "
          "(vllm:num_requests_waiting, vllm:kv_cache_usage_perc, ...); "
          "--no-vllm-metric-names: pagoda_* names only.");
ABSL_FLAG(std::string, kv_events_endpoint, "",
          "Publish the prefix cache's KV events (BlockStored, BlockRemoved, AllBlocksCleared) "
          "on a ZeroMQ PUB socket in vLLM's msgpack layout: tcp://*:PORT binds, "
          "tcp://HOST:PORT connects (vLLM's rule); empty = off. Needs prefix caching.");
ABSL_FLAG(std::string, kv_events_replay_endpoint, "",
          "ZeroMQ ROUTER endpoint (bound) answering replay requests for missed KV event "
          "batches; empty = none.");
ABSL_FLAG(std::string, kv_events_topic, "",
          "Topic frame of every KV event message; default kv@<POD_IP or hostname>@<served "
          "model name>, the form llm-d's indexer reads.");
ABSL_FLAG(int, kv_events_queue_batches, 1024,
          "KV event batches (one per engine step) waiting for the publisher thread beyond which "
          "new ones are dropped and a full resync is sent once there is room again.");
ABSL_FLAG(bool, vllm_grpc_api, true,
          "Also serve vLLM's engine gRPC API (vllm.grpc.engine.VllmEngine) on the gRPC port; "
          "--no-vllm-grpc-api: pagoda.v1 only.");
ABSL_FLAG(int, kv_events_replay_buffer, 10000, "Published KV event batches kept for replay.");

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

void AcceptGatewayFlagSpellings(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) return;
    if (std::strcmp(argv[i], "--no-vllm-metric-names") == 0) {
      argv[i] = const_cast<char*>("--novllm_metric_names");
    }
    if (std::strcmp(argv[i], "--no-vllm-grpc-api") == 0) {
      argv[i] = const_cast<char*>("--novllm_grpc_api");
    }
  }
}

bool VllmMetricNamesEnabled() { return absl::GetFlag(FLAGS_vllm_metric_names); }

absl::StatusOr<std::unique_ptr<KvEventPublisher>> StartKvEventPublisher(
    const std::string& model_name, bool prefix_caching) {
  KvEventPublisherOptions options;
  options.endpoint = absl::GetFlag(FLAGS_kv_events_endpoint);
  options.replay_endpoint = absl::GetFlag(FLAGS_kv_events_replay_endpoint);
  if (options.endpoint.empty()) {
    if (!options.replay_endpoint.empty()) {
      return absl::InvalidArgumentError("--kv-events-replay-endpoint needs --kv-events-endpoint");
    }
    return nullptr;
  }
  if (!prefix_caching) {
    return absl::InvalidArgumentError(
        "--kv-events-endpoint needs prefix caching (drop --no-enable-prefix-caching)");
  }
  options.topic = absl::GetFlag(FLAGS_kv_events_topic);
  if (options.topic.empty()) options.topic = DefaultTopic(model_name);
  options.max_queued_batches = absl::GetFlag(FLAGS_kv_events_queue_batches);
  options.replay_buffer_batches = absl::GetFlag(FLAGS_kv_events_replay_buffer);
  if (options.max_queued_batches < 1 || options.replay_buffer_batches < 0) {
    return absl::InvalidArgumentError(
        "--kv-events-queue-batches must be >= 1 and --kv-events-replay-buffer >= 0");
  }
  absl::StatusOr<std::unique_ptr<KvEventPublisher>> publisher =
      KvEventPublisher::Start(std::move(options));
  if (!publisher.ok()) return publisher.status();
  LOG(INFO) << "KV events: publishing on " << absl::GetFlag(FLAGS_kv_events_endpoint);
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

std::unique_ptr<VllmEngineService> MakeVllmEngineService(const ServedModelInfo& info,
                                                         Engine* engine,
                                                         RequestValidator* validator,
                                                         const Tokenizer* tokenizer,
                                                         const GenerationOptions& options) {
  if (!absl::GetFlag(FLAGS_vllm_grpc_api)) return nullptr;
  return std::make_unique<VllmEngineService>(info, engine, validator, tokenizer, options);
}

}  // namespace pagoda::scheduler
