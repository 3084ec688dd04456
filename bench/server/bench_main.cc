// pagoda-bench: load against a running pagoda-server. For each concurrency
// level, that many client threads each send --rounds Generate requests
// (token-id prompts, ignore_eos, fixed length) and the table shows output
// tokens/s and the engine's mean step time split into schedule, worker RPC
// (transport and waiting), forward (as the workers report it), postprocessing
// and, within forward, rank 0's tensor-parallel all-reduce time, then the
// engine thread's CPU time per step (engcpu_ms: the server's host work,
// which no forward overlaps), read from ModelInfo.engine_stats before and
// after. --warmup requests go first, uncounted. --regex or --json_schema
// constrain every request (structured outputs); --fresh_constraints gives
// each request a schema of its own text, so its grammar is compiled and its
// states computed anew (cold).

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/server/bench_mixed.h"
#include "bench/sim/trace.h"
#include "common/flags.h"
#include "grpcpp/grpcpp.h"
#include "pagoda/v1/generation.grpc.pb.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "pagoda-server address.");
ABSL_FLAG(std::string, concurrency, "1,8,32", "Comma-separated numbers of concurrent clients.");
ABSL_FLAG(int, rounds, 2, "Requests each client sends, one after the other.");
ABSL_FLAG(int, prompt_len, 32, "Prompt tokens per request.");
ABSL_FLAG(int, max_tokens, 64, "Generated tokens per request.");
ABSL_FLAG(int, warmup, 1,
          "Requests (--prompt-len and --max-tokens long) sent one at a time before the first "
          "level and not counted: a fresh server's first steps touch memory for the first "
          "time.");
ABSL_FLAG(std::string, trace, "",
          "Offline throughput on a synthetic trace instead of fixed lengths: sharegpt or "
          "alpaca (bench/sim/trace.h length models); every request is sent at once, "
          "--concurrency clients draining the queue.");
ABSL_FLAG(int, trace_requests, 200, "Requests drawn from --trace (1..100000).");
ABSL_FLAG(uint64_t, trace_seed, 1, "Seeds --trace.");
ABSL_FLAG(float, temperature, -1.0f, "Sampling temperature of every request; < 0 = unset.");
ABSL_FLAG(std::string, regex, "", "Constrain every request's text to this regex.");
ABSL_FLAG(std::string, json_schema, "", "Constrain every request's text to this JSON Schema.");
ABSL_FLAG(bool, fresh_constraints, false,
          "With --json_schema: each request's schema a text of its own (a distinct \"title\"), "
          "so no request finds its grammar compiled or its states computed.");

namespace {

using pagoda::v1::Generation;

pagoda::v1::EngineStats Stats(Generation::Stub& stub) {
  grpc::ClientContext context;
  pagoda::v1::ModelInfo info;
  grpc::Status status = stub.GetModelInfo(&context, pagoda::v1::GetModelInfoRequest(), &info);
  if (!status.ok()) {
    std::fprintf(stderr, "pagoda-bench: GetModelInfo: %s\n", status.error_message().c_str());
    std::exit(1);
  }
  return info.engine_stats();
}

struct LevelResult {
  int concurrency = 0;
  int requests = 0;
  int errors = 0;
  int64_t output_tokens = 0;
  double wall_seconds = 0;
  pagoda::v1::EngineStats before, after;
};

// One request's lengths.
struct Job {
  int prompt_len = 0;
  int max_tokens = 0;
};

// The requests of one level: a trace's (clipped to the server's
// max_model_len), or concurrency * rounds of the fixed lengths.
std::vector<Job> Jobs(int concurrency, int max_model_len) {
  std::vector<Job> jobs;
  const std::string trace = absl::GetFlag(FLAGS_trace);
  if (trace.empty()) {
    jobs.assign(static_cast<size_t>(concurrency) * absl::GetFlag(FLAGS_rounds),
                Job{absl::GetFlag(FLAGS_prompt_len), absl::GetFlag(FLAGS_max_tokens)});
    return jobs;
  }
  namespace sim = pagoda::scheduler::sim;
  const sim::TraceKind kind =
      trace == "alpaca" ? sim::TraceKind::kAlpaca : sim::TraceKind::kShareGpt;
  // Enough arrivals at 1 request/s, then the first trace_requests of them.
  const int wanted = absl::GetFlag(FLAGS_trace_requests);
  std::vector<sim::TraceRequest> requests;
  for (double duration = wanted * 1.5; static_cast<int>(requests.size()) < wanted; duration *= 2) {
    requests =
        sim::SyntheticTrace(kind, 1.0, duration, max_model_len, absl::GetFlag(FLAGS_trace_seed));
  }
  for (int i = 0; i < wanted; ++i)
    jobs.push_back(Job{requests[i].prompt_len, requests[i].output_len});
  return jobs;
}

// The constraint and temperature flags on `request`, the `number`-th sent.
void SetSamplingFlags(int64_t number, pagoda::v1::GenerateRequest& request) {
  if (const float temperature = absl::GetFlag(FLAGS_temperature); temperature >= 0) {
    request.mutable_sampling()->set_temperature(temperature);
  }
  if (const std::string regex = absl::GetFlag(FLAGS_regex); !regex.empty()) {
    request.set_regex(regex);
  }
  std::string schema = absl::GetFlag(FLAGS_json_schema);
  if (schema.empty()) return;
  if (absl::GetFlag(FLAGS_fresh_constraints)) {
    // {"title": "bench N", ...rest}: the same language, another text.
    const size_t brace = schema.find('{');
    if (brace != std::string::npos) {
      schema.insert(brace + 1, absl::StrFormat("\"title\": \"bench %d\", ", number));
    }
  }
  request.set_json_schema(schema);
}

// Requests sent so far by this process: numbers --fresh_constraints' schemas.
std::atomic<int64_t> requests_sent{0};

LevelResult RunLevel(Generation::Stub& stub, int concurrency, int vocab_size,
                     const std::vector<Job>& jobs) {
  LevelResult result;
  result.concurrency = concurrency;
  result.before = Stats(stub);
  absl::Mutex mu;
  size_t next_job = 0;
  const absl::Time start = absl::Now();
  std::vector<std::thread> clients;
  for (int c = 0; c < concurrency; ++c) {
    clients.emplace_back([&, c] {
      for (int round = 0;; ++round) {
        Job job;
        {
          absl::MutexLock lock(&mu);
          if (next_job == jobs.size()) return;
          job = jobs[next_job++];
        }
        pagoda::v1::GenerateRequest request;
        for (int i = 0; i < job.prompt_len; ++i) {
          request.add_prompt_token_ids(3 + (i * 31 + c * 7 + round * 13) % (vocab_size - 3));
        }
        request.mutable_stopping()->set_max_tokens(job.max_tokens);
        SetSamplingFlags(requests_sent.fetch_add(1), request);
        // A constrained text ends where its language does (EOS).
        request.mutable_stopping()->set_ignore_eos(request.constraint_case() ==
                                                   pagoda::v1::GenerateRequest::CONSTRAINT_NOT_SET);
        grpc::ClientContext context;
        pagoda::v1::GenerateResponse response;
        grpc::Status status = stub.Generate(&context, request, &response);
        absl::MutexLock lock(&mu);
        ++result.requests;
        if (!status.ok()) {
          ++result.errors;
          std::fprintf(stderr, "pagoda-bench: %s\n", status.error_message().c_str());
          continue;
        }
        for (const auto& output : response.outputs())
          result.output_tokens += output.token_ids_size();
      }
    });
  }
  for (std::thread& client : clients) client.join();
  result.wall_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  result.after = Stats(stub);
  return result;
}

void PrintRow(const LevelResult& r) {
  const double steps = static_cast<double>(r.after.num_steps() - r.before.num_steps());
  auto per_step_ms = [&](double before, double after) {
    return steps > 0 ? 1000.0 * (after - before) / steps : 0.0;
  };
  const double schedule =
      per_step_ms(r.before.schedule_seconds_total(), r.after.schedule_seconds_total());
  const double rpc =
      per_step_ms(r.before.worker_rpc_seconds_total(), r.after.worker_rpc_seconds_total());
  const double forward =
      per_step_ms(r.before.forward_seconds_total(), r.after.forward_seconds_total());
  const double post =
      per_step_ms(r.before.postprocess_seconds_total(), r.after.postprocess_seconds_total());
  const double all_reduce =
      per_step_ms(r.before.all_reduce_seconds_total(), r.after.all_reduce_seconds_total());
  const double engine_cpu =
      per_step_ms(r.before.engine_cpu_seconds_total(), r.after.engine_cpu_seconds_total());
  const double batch =
      steps > 0 ? (r.after.batched_sequences_total() - r.before.batched_sequences_total()) / steps
                : 0.0;
  std::printf(
      "%11d %8d %6d %9lld %8.2f %10.1f %7.0f %7.1f %9.2f %9.3f %8.3f %9.2f %8.3f %9.3f %10.3f\n",
      r.concurrency, r.requests, r.errors, static_cast<long long>(r.output_tokens), r.wall_seconds,
      r.output_tokens / r.wall_seconds, steps, batch, schedule + rpc + forward + post, schedule,
      rpc, forward, post, all_reduce, engine_cpu);
}

// One client thread per concurrent request.
constexpr int kMaxConcurrency = 4096;

// --concurrency and --warmup, checked before connecting so that a typo fails
// before any request is sent. Empty on a bad flag (already reported).
std::optional<std::vector<int>> ParseLoadFlags() {
  std::optional<std::vector<int>> levels =
      pagoda::ParsePositiveIntList(absl::GetFlag(FLAGS_concurrency));
  if (!levels || *std::max_element(levels->begin(), levels->end()) > kMaxConcurrency) {
    std::fprintf(stderr,
                 "pagoda-bench: --concurrency must be a list of integers in [1, %d], got '%s'\n",
                 kMaxConcurrency, absl::GetFlag(FLAGS_concurrency).c_str());
    return std::nullopt;
  }
  const int warmup = absl::GetFlag(FLAGS_warmup);
  if (warmup < 0 || warmup > 1000) {
    std::fprintf(stderr, "pagoda-bench: --warmup must be in [0, 1000]\n");
    return std::nullopt;
  }
  return levels;
}

// --trace and --trace-requests; false on a bad flag (already reported).
bool CheckTraceFlags() {
  const std::string trace = absl::GetFlag(FLAGS_trace);
  if (!trace.empty() && trace != "sharegpt" && trace != "alpaca") {
    std::fprintf(stderr, "pagoda-bench: --trace must be sharegpt or alpaca, got '%s'\n",
                 trace.c_str());
    return false;
  }
  if (absl::GetFlag(FLAGS_trace_requests) < 1 || absl::GetFlag(FLAGS_trace_requests) > 100000) {
    std::fprintf(stderr, "pagoda-bench: --trace_requests must be in [1, 100000]\n");
    return false;
  }
  return true;
}

// What the run measures, then the column names of PrintRow.
void PrintHeader(const pagoda::v1::ModelInfo& info) {
  const std::string trace = absl::GetFlag(FLAGS_trace);
  if (trace.empty()) {
    std::printf("model %s (vocab %d), prompt %d tokens, %d output tokens, %d rounds per client\n",
                info.model_name().c_str(), info.vocab_size(), absl::GetFlag(FLAGS_prompt_len),
                absl::GetFlag(FLAGS_max_tokens), absl::GetFlag(FLAGS_rounds));
  } else {
    std::printf("model %s (vocab %d), offline %s-like trace of %d requests (max_model_len %d)\n",
                info.model_name().c_str(), info.vocab_size(), trace.c_str(),
                absl::GetFlag(FLAGS_trace_requests), info.max_model_len());
  }
  std::printf("%11s %8s %6s %9s %8s %10s %7s %7s %9s %9s %8s %9s %8s %9s %10s\n", "concurrency",
              "requests", "errors", "out_tok", "wall_s", "out_tok/s", "steps", "batch", "step_ms",
              "sched_ms", "rpc_ms", "fwd_ms", "post_ms", "allred_ms", "engcpu_ms");
}

// --warmup requests, one at a time and uncounted; false if any failed.
bool WarmUp(Generation::Stub& stub, int vocab_size) {
  const int warmup = absl::GetFlag(FLAGS_warmup);
  if (warmup == 0) return true;
  const LevelResult warm = RunLevel(stub, 1, vocab_size,
                                    std::vector<Job>(warmup, Job{absl::GetFlag(FLAGS_prompt_len),
                                                                 absl::GetFlag(FLAGS_max_tokens)}));
  if (warm.errors > 0) {
    std::fprintf(stderr, "pagoda-bench: %d of %d warm-up requests failed\n", warm.errors, warmup);
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  pagoda::ParsePagodaCommandLine(argc, argv,
                                 {"pagoda-bench", "pagoda-bench [flags]: engine benchmark"});
  const std::optional<std::vector<int>> levels = ParseLoadFlags();
  if (!levels) return 1;
  if (absl::GetFlag(FLAGS_mixed) && !pagoda::bench::MixedFlagsInRange()) {
    std::fprintf(stderr, "pagoda-bench: a --mixed-* flag is out of range\n");
    return 1;
  }
  auto channel =
      grpc::CreateChannel(absl::GetFlag(FLAGS_server), grpc::InsecureChannelCredentials());
  auto stub = Generation::NewStub(channel);
  grpc::ClientContext context;
  pagoda::v1::ModelInfo info;
  grpc::Status status = stub->GetModelInfo(&context, pagoda::v1::GetModelInfoRequest(), &info);
  if (!status.ok()) {
    std::fprintf(stderr, "pagoda-bench: %s\n", status.error_message().c_str());
    return 1;
  }
  if (absl::GetFlag(FLAGS_mixed)) return pagoda::bench::RunMixedBench(*stub, info);
  if (!CheckTraceFlags()) return 1;
  PrintHeader(info);
  if (!WarmUp(*stub, info.vocab_size())) return 1;
  for (const int concurrency : *levels) {
    PrintRow(RunLevel(*stub, concurrency, info.vocab_size(),
                      Jobs(concurrency, std::max(2, info.max_model_len()))));
  }
  return 0;
}
