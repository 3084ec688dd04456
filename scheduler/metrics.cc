#include "scheduler/metrics.h"

#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "scheduler/lora_metrics.h"
#include "scheduler/spec_decode_metrics.h"
#include "scheduler/vllm_request_metrics.h"

namespace pagoda::scheduler {

using prometheus::Counter;
using prometheus::Gauge;
using prometheus::Histogram;

struct ServerMetrics::Instruments {
  Gauge* requests_running;
  Gauge* requests_waiting;
  Gauge* requests_swapped;
  Gauge* batch_size;
  Gauge* gpu_blocks_free;
  Gauge* gpu_blocks;
  Gauge* gpu_blocks_total;  // Deprecated name of gpu_blocks.
  Gauge* cpu_blocks_free;
  Gauge* cpu_blocks;
  Gauge* cpu_blocks_total;  // Deprecated name of cpu_blocks.
  Gauge* gpu_cache_usage;
  Gauge* kv_token_utilization;
  Gauge* healthy;
  Counter* preemptions;
  Counter* prompt_tokens;
  Counter* prefix_cache_queries;
  Counter* prefix_cache_hits;
  Histogram* request_preemptions;
  Counter* generation_tokens;
  Counter* forward_seconds;
  Counter* mask_wait_seconds;
  Counter* engine_cpu_seconds;
  Counter* steps;
  Counter* overlapped_steps;
  Counter* all_reduce_seconds;
  prometheus::Family<Counter>* finished_family;
  prometheus::Labels labels;
  Histogram* time_to_first_token;
  Histogram* time_per_output_token;
  Histogram* e2e_latency;
  Histogram* queue_time;
  Histogram* step_time;
  Histogram* tokens_per_step;
  Histogram* tokens_per_step_deprecated;
  Counter* worker_restarts;
  Counter* requests_resumed;
  Histogram* worker_recovery_time;
  // vLLM's names for the same state (null when --no-vllm-metric-names).
  Gauge* vllm_requests_running = nullptr;
  Gauge* vllm_requests_waiting = nullptr;
  Gauge* vllm_kv_cache_usage = nullptr;
  Gauge* vllm_gpu_cache_usage = nullptr;  // The older name of the same gauge.
  Counter* vllm_prefix_cache_hits = nullptr;
  Counter* vllm_prefix_cache_queries = nullptr;
  prometheus::Family<Gauge>* vllm_cache_config = nullptr;

  // Every instrument, labelled with `model_name`, registered in `registry`.
  // Within each kind (gauge, counter, histogram) the registration order is
  // the order of the /metrics page.
  static std::unique_ptr<Instruments> Register(prometheus::Registry& registry,
                                               const std::string& model_name, bool vllm_names);

 private:
  // The engine's state as of the last step or scrape.
  void AddStateGauges(prometheus::Registry& r);
  // Running totals, and finished requests by reason.
  void AddCounters(prometheus::Registry& r);
  // Per-request and per-step distributions.
  void AddLatencyHistograms(prometheus::Registry& r);
  // Worker restarts and what they cost.
  void AddRecoveryMetrics(prometheus::Registry& r);
  // The gauges and counters vLLM's consumers read, under vLLM's names, types
  // and units (fractions 0..1, prefix cache in tokens).
  void AddVllmNames(prometheus::Registry& r);
};

namespace {

Gauge* AddGauge(prometheus::Registry& registry, const std::string& name, const std::string& help,
                const prometheus::Labels& labels) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add(labels);
}

Counter* AddCounter(prometheus::Registry& registry, const std::string& name,
                    const std::string& help, const prometheus::Labels& labels) {
  return &prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add(labels);
}

Histogram* AddHistogram(prometheus::Registry& registry, const std::string& name,
                        const std::string& help, const prometheus::Labels& labels,
                        std::vector<double> buckets) {
  return &prometheus::BuildHistogram().Name(name).Help(help).Register(registry).Add(
      labels, Histogram::BucketBoundaries(std::move(buckets)));
}

const std::vector<double> kLatencyBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08,
                                             0.1,   0.25,  0.5,  0.75, 1.0,  2.5,  5.0,
                                             7.5,   10.0,  20.0, 40.0, 80.0};

}  // namespace

// What the exposer collects for /metrics: the gauges set from one snapshot
// of the engine, then every family of the registry, under mu_. Nothing else
// sets a gauge, so a scrape never sees half a step: a vllm:* series always
// equals the pagoda_* series it mirrors.
class ServerMetrics::ConsistentScrape : public prometheus::Collectable {
 public:
  explicit ConsistentScrape(ServerMetrics* owner) : owner_(owner) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    absl::MutexLock lock(&owner_->mu_);
    owner_->RefreshFromSourceLocked();
    return owner_->registry_->Collect();
  }

 private:
  ServerMetrics* owner_;
};

std::unique_ptr<ServerMetrics::Instruments> ServerMetrics::Instruments::Register(
    prometheus::Registry& registry, const std::string& model_name, bool vllm_names) {
  auto instruments = std::make_unique<Instruments>();
  instruments->labels = {{"model_name", model_name}};
  instruments->AddStateGauges(registry);
  instruments->AddCounters(registry);
  instruments->AddLatencyHistograms(registry);
  instruments->AddRecoveryMetrics(registry);
  if (vllm_names) instruments->AddVllmNames(registry);
  return instruments;
}

void ServerMetrics::Instruments::AddVllmNames(prometheus::Registry& r) {
  vllm_requests_running = AddGauge(r, "vllm:num_requests_running",
                                   "Requests in the running batch (vLLM's name).", labels);
  vllm_requests_waiting = AddGauge(r, "vllm:num_requests_waiting",
                                   "Requests waiting to be scheduled (vLLM's name).", labels);
  vllm_kv_cache_usage = AddGauge(r, "vllm:kv_cache_usage_perc",
                                 "KV cache usage, 0..1 (1 = every block in use).", labels);
  vllm_gpu_cache_usage =
      AddGauge(r, "vllm:gpu_cache_usage_perc",
               "KV cache usage, 0..1 (vLLM's older name of vllm:kv_cache_usage_perc).", labels);
  vllm_prefix_cache_queries =
      AddCounter(r, "vllm:gpu_prefix_cache_queries_total",
                 "Prefix cache queries, in prompt tokens looked up (vLLM's name).", labels);
  vllm_prefix_cache_hits =
      AddCounter(r, "vllm:gpu_prefix_cache_hits_total",
                 "Prefix cache hits, in prompt tokens found (vLLM's name).", labels);
  vllm_cache_config = &prometheus::BuildGauge()
                           .Name("vllm:cache_config_info")
                           .Help("The KV cache's configuration, in labels (value 1).")
                           .Register(r);
}

void ServerMetrics::Instruments::AddStateGauges(prometheus::Registry& r) {
  requests_running =
      AddGauge(r, "pagoda_num_requests_running", "Requests in the running batch.", labels);
  requests_waiting =
      AddGauge(r, "pagoda_num_requests_waiting", "Requests waiting to be scheduled.", labels);
  requests_swapped =
      AddGauge(r, "pagoda_num_requests_swapped", "Requests swapped out to CPU memory.", labels);
  batch_size = AddGauge(r, "pagoda_batch_size", "Sequences in the last step.", labels);
  gpu_blocks_free = AddGauge(r, "pagoda_gpu_blocks_free", "Free KV blocks.", labels);
  gpu_blocks = AddGauge(r, "pagoda_gpu_blocks", "All KV blocks.", labels);
  gpu_blocks_total =
      AddGauge(r, "pagoda_gpu_blocks_total",
               "Deprecated (a gauge with a counter's name): pagoda_gpu_blocks.", labels);
  cpu_blocks_free = AddGauge(r, "pagoda_cpu_blocks_free", "Free swap blocks.", labels);
  cpu_blocks = AddGauge(r, "pagoda_cpu_blocks", "All swap blocks.", labels);
  cpu_blocks_total =
      AddGauge(r, "pagoda_cpu_blocks_total",
               "Deprecated (a gauge with a counter's name): pagoda_cpu_blocks.", labels);
  gpu_cache_usage =
      AddGauge(r, "pagoda_gpu_cache_usage_perc", "Fraction of KV blocks in use (0..1).", labels);
  kv_token_utilization =
      AddGauge(r, "pagoda_kv_token_utilization_perc",
               "Fraction of the KV slots held by running sequences that hold a token (0..1); "
               "the vLLM paper's Fig. 2 figure.",
               labels);
  healthy = AddGauge(r, "pagoda_healthy",
                     "0 once a worker has failed (health checks say NOT_SERVING), else 1.", labels);
}

void ServerMetrics::Instruments::AddCounters(prometheus::Registry& r) {
  preemptions = AddCounter(r, "pagoda_num_preemptions_total", "Preempted groups.", labels);
  prompt_tokens = AddCounter(r, "pagoda_prompt_tokens_total", "Prompt tokens computed.", labels);
  generation_tokens = AddCounter(r, "pagoda_generation_tokens_total", "Tokens generated.", labels);
  forward_seconds =
      AddCounter(r, "pagoda_forward_seconds_total",
                 "Seconds of model forward and sampling, as rank 0 reports them.", labels);
  all_reduce_seconds =
      AddCounter(r, "pagoda_all_reduce_seconds_total",
                 "Of the forward seconds, rank 0's time in tensor-parallel all-reduces.", labels);
  mask_wait_seconds = AddCounter(
      r, "pagoda_mask_wait_seconds_total",
      "Of the forward seconds, rank 0's wait after its forward pass for the step's token masks "
      "(structured outputs): mask work the forward pass did not hide.",
      labels);
  steps = AddCounter(r, "pagoda_steps_total", "Steps the engine sent to the workers.", labels);
  overlapped_steps = AddCounter(
      r, "pagoda_overlapped_steps_total",
      "Of those, steps sent while the previous one still ran (overlapped scheduling): their "
      "host work was hidden behind a forward pass.",
      labels);
  engine_cpu_seconds = AddCounter(
      r, "pagoda_engine_cpu_seconds_total",
      "CPU seconds of the engine thread in steps: the server's host work (schedule, plan, "
      "results, streaming), which no forward pass overlaps unless the step was overlapped.",
      labels);
  prefix_cache_queries = AddCounter(r, "pagoda_prefix_cache_queries_total",
                                    "Prompt tokens looked up in the prefix cache.", labels);
  prefix_cache_hits = AddCounter(r, "pagoda_prefix_cache_hits_total",
                                 "Prompt tokens found in the prefix cache.", labels);
  finished_family = &prometheus::BuildCounter()
                         .Name("pagoda_request_success_total")
                         .Help("Finished requests by finish reason.")
                         .Register(r);
}

void ServerMetrics::Instruments::AddLatencyHistograms(prometheus::Registry& r) {
  request_preemptions =
      AddHistogram(r, "pagoda_request_preemptions",
                   "Times each finished request was preempted; a heavy tail means thrashing.",
                   labels, {0, 1, 2, 4, 8, 16, 32, 64});
  time_to_first_token = AddHistogram(r, "pagoda_time_to_first_token_seconds",
                                     "Arrival to first token.", labels, kLatencyBuckets);
  time_per_output_token =
      AddHistogram(r, "pagoda_time_per_output_token_seconds",
                   "Time between two generated tokens of a request, observed once per token "
                   "after the first (the request's mean gap).",
                   labels, kLatencyBuckets);
  e2e_latency = AddHistogram(r, "pagoda_e2e_request_latency_seconds", "Arrival to finish.", labels,
                             kLatencyBuckets);
  queue_time = AddHistogram(r, "pagoda_request_queue_time_seconds", "Arrival to first scheduled.",
                            labels, kLatencyBuckets);
  step_time = AddHistogram(r, "pagoda_step_time_seconds", "Engine step wall time.", labels,
                           kLatencyBuckets);
  const std::vector<double> token_buckets = {1,   8,   16,   32,   64,   128,
                                             256, 512, 1024, 2048, 4096, 8192};
  tokens_per_step = AddHistogram(r, "pagoda_iteration_tokens", "Tokens computed per step.",
                                 labels, token_buckets);
  tokens_per_step_deprecated = AddHistogram(
      r, "pagoda_iteration_tokens_total",
      "Deprecated (a histogram with a counter's suffix): pagoda_iteration_tokens.", labels,
      token_buckets);
}

void ServerMetrics::Instruments::AddRecoveryMetrics(prometheus::Registry& r) {
  worker_restarts = AddCounter(r, "pagoda_worker_restarts_total",
                               "Times the worker group was restarted after a failure.", labels);
  requests_resumed =
      AddCounter(r, "pagoda_requests_resumed_total",
                 "Requests resumed by recomputation after a worker restart.", labels);
  worker_recovery_time = AddHistogram(
      r, "pagoda_worker_recovery_seconds",
      "Worker failure to serving again: restart, model load, KV cache.", labels, kLatencyBuckets);
}

absl::StatusOr<std::unique_ptr<ServerMetrics>> ServerMetrics::Start(const std::string& host,
                                                                    int port,
                                                                    const std::string& model_name,
                                                                    bool vllm_names) {
  std::unique_ptr<ServerMetrics> metrics(new ServerMetrics());
  metrics->model_name_ = model_name;
  metrics->vllm_names_ = vllm_names;
  try {
    metrics->exposer_ = std::make_unique<prometheus::Exposer>(absl::StrCat(host, ":", port));
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", host, ":", port, ": ", e.what()));
  }
  std::vector<int> ports = metrics->exposer_->GetListeningPorts();
  metrics->port_ = ports.empty() ? port : ports.front();
  metrics->registry_ = std::make_shared<prometheus::Registry>();
  metrics->instruments_ = Instruments::Register(*metrics->registry_, model_name, vllm_names);
  if (vllm_names) {
    metrics->vllm_requests_ =
        std::make_unique<VllmRequestMetrics>(*metrics->registry_, model_name);
  }
  // Healthy until the engine reports a failure: a server still loading its
  // model is not a worker outage.
  metrics->instruments_->healthy->Set(1);
  metrics->scrape_ = std::make_shared<ConsistentScrape>(metrics.get());
  metrics->exposer_->RegisterCollectable(metrics->scrape_);
  return metrics;
}

// The HTTP server goes first, so no scrape runs while the rest is destroyed.
ServerMetrics::~ServerMetrics() { exposer_.reset(); }

void ServerMetrics::SetCacheConfig(int block_size, int num_gpu_blocks, int num_cpu_blocks,
                                   bool enable_prefix_caching) {
  if (instruments_->vllm_cache_config == nullptr) return;
  // vLLM puts its CacheConfig's fields in the labels, as strings.
  instruments_->vllm_cache_config
      ->Add({{"model_name", model_name_},
             {"block_size", absl::StrCat(block_size)},
             {"num_gpu_blocks", absl::StrCat(num_gpu_blocks)},
             {"num_cpu_blocks", absl::StrCat(num_cpu_blocks)},
             {"enable_prefix_caching", enable_prefix_caching ? "True" : "False"}})
      .Set(1);
}

void ServerMetrics::RegisterPage(const std::shared_ptr<prometheus::Collectable>& collectable,
                                 const std::string& uri) {
  exposer_->RegisterCollectable(collectable, uri);
}

void ServerMetrics::SetSnapshotSource(std::function<EngineSnapshot()> source) {
  absl::MutexLock lock(&mu_);
  source_ = std::move(source);
}

// The engine never takes mu_, so taking its lock (in source_) under mu_
// cannot deadlock.
void ServerMetrics::RefreshFromSourceLocked() {
  if (!source_) return;
  const EngineSnapshot snapshot = source_();
  // Nothing running means the last batch is over: no step is in progress.
  SetGauges(snapshot, snapshot.num_running == 0 ? 0 : snapshot.last_batch_size);
  if (vllm_names_ && snapshot.lora.max_loras > 0) {
    if (lora_info_ == nullptr) lora_info_ = std::make_unique<LoraRequestsInfo>(*registry_);
    lora_info_->Update(snapshot.lora, absl::Now());
  }
}

void ServerMetrics::SetGauges(const EngineSnapshot& snapshot, int batch_size) {
  Instruments& in = *instruments_;
  in.healthy->Set(snapshot.healthy ? 1 : 0);
  in.requests_running->Set(snapshot.num_running);
  in.requests_waiting->Set(snapshot.num_waiting);
  in.requests_swapped->Set(snapshot.num_swapped);
  in.batch_size->Set(batch_size);
  in.gpu_blocks_free->Set(snapshot.free_gpu_blocks);
  in.gpu_blocks->Set(snapshot.num_gpu_blocks);
  in.gpu_blocks_total->Set(snapshot.num_gpu_blocks);
  in.cpu_blocks_free->Set(snapshot.free_cpu_blocks);
  in.cpu_blocks->Set(snapshot.num_cpu_blocks);
  in.cpu_blocks_total->Set(snapshot.num_cpu_blocks);
  in.gpu_cache_usage->Set(snapshot.num_gpu_blocks == 0
                              ? 0.0
                              : 1.0 - static_cast<double>(snapshot.free_gpu_blocks) /
                                          snapshot.num_gpu_blocks);
  // The slot counts are refreshed only on some steps; with nothing running
  // no slot is allocated.
  if (in.vllm_requests_running != nullptr) {
    in.vllm_requests_running->Set(snapshot.num_running);
    in.vllm_requests_waiting->Set(snapshot.num_waiting);
    in.vllm_kv_cache_usage->Set(in.gpu_cache_usage->Value());
    in.vllm_gpu_cache_usage->Set(in.gpu_cache_usage->Value());
  }
  in.kv_token_utilization->Set(snapshot.num_running == 0 || snapshot.kv_allocated_slots == 0
                                   ? 0.0
                                   : static_cast<double>(snapshot.kv_filled_slots) /
                                         static_cast<double>(snapshot.kv_allocated_slots));
}

void ServerMetrics::OnStep(const StepRecord& step, const EngineSnapshot& snapshot) {
  Instruments& in = *instruments_;
  // Counters follow the engine's totals (only ever growing).
  auto catch_up = [](Counter* counter, double total) {
    if (total > counter->Value()) counter->Increment(total - counter->Value());
  };
  catch_up(in.preemptions, static_cast<double>(snapshot.num_preemptions_total));
  catch_up(in.prompt_tokens, static_cast<double>(snapshot.prompt_tokens_total));
  catch_up(in.prefix_cache_queries, static_cast<double>(snapshot.prefix_cache_queries_total));
  catch_up(in.prefix_cache_hits, static_cast<double>(snapshot.prefix_cache_hits_total));
  if (in.vllm_prefix_cache_hits != nullptr) {
    catch_up(in.vllm_prefix_cache_queries,
             static_cast<double>(snapshot.prefix_cache_queries_total));
    catch_up(in.vllm_prefix_cache_hits, static_cast<double>(snapshot.prefix_cache_hits_total));
  }
  catch_up(in.generation_tokens, static_cast<double>(snapshot.generation_tokens_total));
  catch_up(in.forward_seconds, snapshot.seconds_total.forward);
  catch_up(in.all_reduce_seconds, snapshot.seconds_total.all_reduce);
  catch_up(in.mask_wait_seconds, snapshot.seconds_total.mask_wait);
  catch_up(in.engine_cpu_seconds, snapshot.seconds_total.engine_cpu);
  catch_up(in.steps, static_cast<double>(snapshot.num_steps));
  catch_up(in.overlapped_steps, static_cast<double>(snapshot.num_overlapped_steps));
  in.step_time->Observe(step.total_seconds);
  in.tokens_per_step->Observe(step.num_batched_tokens);
  in.tokens_per_step_deprecated->Observe(step.num_batched_tokens);
  if (vllm_requests_ != nullptr) vllm_requests_->OnStep(step, snapshot);
  if (spec_decode_ != nullptr) spec_decode_->OnStep(snapshot.spec_decode);
}

void ServerMetrics::SetSpeculation(int num_speculative_tokens) {
  spec_decode_ = std::make_unique<SpecDecodeMetrics>(*registry_, model_name_,
                                                     num_speculative_tokens, vllm_names_);
}

void ServerMetrics::OnWorkersRecovered(int requests_resumed, double seconds) {
  Instruments& in = *instruments_;
  in.worker_restarts->Increment();
  in.requests_resumed->Increment(requests_resumed);
  in.worker_recovery_time->Observe(seconds);
}

void ServerMetrics::OnRequestFinished(const RequestRecord& record) {
  if (vllm_requests_ != nullptr) vllm_requests_->OnRequestFinished(record);
  Instruments& in = *instruments_;
  prometheus::Labels labels = in.labels;
  labels["finished_reason"] = record.finish_reason;
  in.finished_family->Add(labels).Increment();
  in.e2e_latency->Observe(absl::ToDoubleSeconds(record.finish_time - record.arrival_time));
  in.request_preemptions->Observe(record.num_preemptions);
  if (record.first_scheduled_time != absl::InfinitePast()) {
    in.queue_time->Observe(
        absl::ToDoubleSeconds(record.first_scheduled_time - record.arrival_time));
  }
  if (record.first_token_time != absl::InfinitePast()) {
    in.time_to_first_token->Observe(
        absl::ToDoubleSeconds(record.first_token_time - record.arrival_time));
    // One observation per output token after the first, as vLLM counts
    // them; the engine reports no per-token times, so each is the mean gap.
    if (record.num_generated_tokens > 1) {
      const double mean_gap = absl::ToDoubleSeconds(record.finish_time - record.first_token_time) /
                              (record.num_generated_tokens - 1);
      for (int i = 1; i < record.num_generated_tokens; ++i) {
        in.time_per_output_token->Observe(mean_gap);
      }
    }
  }
}

}  // namespace pagoda::scheduler
