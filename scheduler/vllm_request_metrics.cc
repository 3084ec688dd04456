#include "scheduler/vllm_request_metrics.h"

#include <vector>

#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace pagoda::scheduler {
namespace {

using prometheus::Counter;
using prometheus::Histogram;

// vLLM's buckets, family by family.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                          0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kTokenGapBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                              0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                              7.5,  10.0,  20.0, 40.0,  80.0};
const std::vector<double> kRequestLatencyBuckets = {
    0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
const std::vector<double> kIterationTokenBuckets = {1,   8,    16,   32,   64,   128,  256,
                                                    512, 1024, 2048, 4096, 8192, 16384};

// 1, 2, 5, 10, 20, 50, ... up to 10^6 tokens: vLLM's token-count buckets
// (it stops at max_model_len; the buckets past it stay empty).
std::vector<double> OneTwoFiveBuckets() {
  std::vector<double> buckets;
  for (double scale = 1; scale <= 1e6; scale *= 10) {
    for (double mantissa : {1.0, 2.0, 5.0}) buckets.push_back(mantissa * scale);
  }
  return buckets;
}

double Seconds(absl::Time from, absl::Time to) { return absl::ToDoubleSeconds(to - from); }

}  // namespace

struct VllmRequestMetrics::Instruments {
  prometheus::Labels labels;
  Counter* prompt_tokens;
  Counter* generation_tokens;
  Counter* preemptions;
  Counter* prefix_cache_queries;
  Counter* prefix_cache_hits;
  prometheus::Family<Counter>* request_success;
  Histogram* iteration_tokens;
  Histogram* request_prompt_tokens;
  Histogram* request_generation_tokens;
  Histogram* request_max_num_generation_tokens;
  Histogram* request_params_max_tokens;
  Histogram* time_to_first_token;
  Histogram* inter_token_latency;
  Histogram* time_per_output_token;
  Histogram* e2e_latency;
  Histogram* queue_time;
  Histogram* inference_time;
  Histogram* prefill_time;
  Histogram* decode_time;
};

namespace {

Counter* AddCounter(prometheus::Registry& registry, const char* name, const char* help,
                    const prometheus::Labels& labels) {
  return &prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add(labels);
}

Histogram* AddHistogram(prometheus::Registry& registry, const char* name, const char* help,
                        const prometheus::Labels& labels, const std::vector<double>& buckets) {
  return &prometheus::BuildHistogram().Name(name).Help(help).Register(registry).Add(
      labels, Histogram::BucketBoundaries(buckets));
}

}  // namespace

VllmRequestMetrics::VllmRequestMetrics(prometheus::Registry& r, const std::string& model_name)
    : in_(std::make_unique<Instruments>()) {
  Instruments& in = *in_;
  const prometheus::Labels& l = in.labels = {{"model_name", model_name}};
  in.prompt_tokens = AddCounter(r, "vllm:prompt_tokens_total", "Prefill tokens processed.", l);
  in.generation_tokens =
      AddCounter(r, "vllm:generation_tokens_total", "Generation tokens processed.", l);
  in.preemptions = AddCounter(r, "vllm:num_preemptions_total", "Cumulative preemptions.", l);
  in.prefix_cache_queries =
      AddCounter(r, "vllm:prefix_cache_queries_total", "Prefix cache queries, in tokens.", l);
  in.prefix_cache_hits =
      AddCounter(r, "vllm:prefix_cache_hits_total", "Prefix cache hits, in tokens.", l);
  in.request_success = &prometheus::BuildCounter()
                            .Name("vllm:request_success_total")
                            .Help("Successfully processed requests, by finish reason.")
                            .Register(r);
  const std::vector<double> lengths = OneTwoFiveBuckets();
  in.iteration_tokens = AddHistogram(r, "vllm:iteration_tokens_total", "Tokens per engine step.", l,
                                     kIterationTokenBuckets);
  in.request_prompt_tokens =
      AddHistogram(r, "vllm:request_prompt_tokens", "Prompt tokens per request.", l, lengths);
  in.request_generation_tokens = AddHistogram(r, "vllm:request_generation_tokens",
                                              "Generation tokens per request.", l, lengths);
  in.request_max_num_generation_tokens =
      AddHistogram(r, "vllm:request_max_num_generation_tokens",
                   "Most generation tokens a request asked for.", l, lengths);
  in.request_params_max_tokens = AddHistogram(r, "vllm:request_params_max_tokens",
                                              "The max_tokens request parameter.", l, lengths);
  in.time_to_first_token = AddHistogram(r, "vllm:time_to_first_token_seconds",
                                        "Time to first token, seconds.", l, kTtftBuckets);
  in.inter_token_latency = AddHistogram(r, "vllm:inter_token_latency_seconds",
                                        "Inter-token latency, seconds.", l, kTokenGapBuckets);
  in.time_per_output_token =
      AddHistogram(r, "vllm:request_time_per_output_token_seconds",
                   "Mean time per output token of each request, seconds.", l, kTokenGapBuckets);
  in.e2e_latency = AddHistogram(r, "vllm:e2e_request_latency_seconds",
                                "End-to-end request latency, seconds.", l, kRequestLatencyBuckets);
  in.queue_time = AddHistogram(r, "vllm:request_queue_time_seconds",
                               "Time in the waiting queue, seconds.", l, kRequestLatencyBuckets);
  in.inference_time = AddHistogram(r, "vllm:request_inference_time_seconds",
                                   "Time running, seconds.", l, kRequestLatencyBuckets);
  in.prefill_time = AddHistogram(r, "vllm:request_prefill_time_seconds",
                                 "Time in prefill, seconds.", l, kRequestLatencyBuckets);
  in.decode_time = AddHistogram(r, "vllm:request_decode_time_seconds", "Time in decode, seconds.",
                                l, kRequestLatencyBuckets);
}

VllmRequestMetrics::~VllmRequestMetrics() = default;

void VllmRequestMetrics::OnStep(const StepRecord& step, const EngineSnapshot& snapshot) {
  Instruments& in = *in_;
  auto catch_up = [](Counter* counter, double total) {
    if (total > counter->Value()) counter->Increment(total - counter->Value());
  };
  catch_up(in.prompt_tokens, static_cast<double>(snapshot.prompt_tokens_total));
  catch_up(in.generation_tokens, static_cast<double>(snapshot.generation_tokens_total));
  catch_up(in.preemptions, static_cast<double>(snapshot.num_preemptions_total));
  catch_up(in.prefix_cache_queries, static_cast<double>(snapshot.prefix_cache_queries_total));
  catch_up(in.prefix_cache_hits, static_cast<double>(snapshot.prefix_cache_hits_total));
  in.iteration_tokens->Observe(step.num_batched_tokens);
}

void VllmRequestMetrics::OnRequestFinished(const RequestRecord& record) {
  Instruments& in = *in_;
  prometheus::Labels labels = in.labels;
  labels["finished_reason"] = record.finish_reason;
  in.request_success->Add(labels).Increment();
  in.request_prompt_tokens->Observe(record.num_prompt_tokens);
  in.request_generation_tokens->Observe(record.num_generated_tokens);
  in.request_max_num_generation_tokens->Observe(record.max_tokens);
  in.request_params_max_tokens->Observe(record.max_tokens);
  in.e2e_latency->Observe(Seconds(record.arrival_time, record.finish_time));
  if (record.first_scheduled_time == absl::InfinitePast()) return;
  in.queue_time->Observe(Seconds(record.arrival_time, record.first_scheduled_time));
  in.inference_time->Observe(Seconds(record.first_scheduled_time, record.finish_time));
  if (record.first_token_time == absl::InfinitePast()) return;
  in.time_to_first_token->Observe(Seconds(record.arrival_time, record.first_token_time));
  in.prefill_time->Observe(Seconds(record.first_scheduled_time, record.first_token_time));
  in.decode_time->Observe(Seconds(record.first_token_time, record.finish_time));
  if (record.num_generated_tokens < 2) return;
  // The engine reports no per-token times: each gap is the request's mean,
  // one observation per token after the first, as vLLM counts them.
  const double mean_gap =
      Seconds(record.first_token_time, record.finish_time) / (record.num_generated_tokens - 1);
  for (int i = 1; i < record.num_generated_tokens; ++i) in.inter_token_latency->Observe(mean_gap);
  in.time_per_output_token->Observe(mean_gap);
}

}  // namespace pagoda::scheduler
