#include "bench/server/bench_mixed.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

ABSL_FLAG(bool, mixed, false,
          "Mixed workload instead of the concurrency levels: decoding streams while long "
          "prompts arrive (the --mixed-* flags).");
ABSL_FLAG(int, mixed_streams, 16, "Decoding streams (1..1024).");
ABSL_FLAG(int, mixed_context, 256, "Prompt tokens of each stream's requests.");
ABSL_FLAG(int, mixed_stream_tokens, 128, "Tokens each stream request generates before the next.");
ABSL_FLAG(int, mixed_long_prompt, 2048, "Tokens of each long prompt.");
ABSL_FLAG(int, mixed_long_tokens, 8, "Tokens each long prompt generates.");
ABSL_FLAG(double, mixed_long_every, 2.0, "Seconds between long prompts; 0 = none (baseline).");
ABSL_FLAG(double, mixed_duration, 60.0, "Seconds of load (1..3600).");
ABSL_FLAG(std::string, mixed_plot, "mixed_itl.svg", "SVG plot of ITL over time; empty = none.");
ABSL_FLAG(double, mixed_urgent_every, 0.0,
          "Seconds between urgent requests (priority --mixed-urgent-priority, the streams and "
          "long prompts 0); 0 = none. Their TTFT is also taken on the idle server first.");
ABSL_FLAG(int, mixed_urgent_idle_requests, 40,
          "Urgent requests timed one after another on the idle server, before the load "
          "(1..1000): the baseline of the urgent row.");
ABSL_FLAG(int, mixed_urgent_prompt, 64, "Tokens of each urgent request's prompt.");
ABSL_FLAG(int, mixed_urgent_priority, -1,
          "Priority of the urgent requests (lower runs first under --scheduling-policy "
          "priority).");

namespace pagoda::bench {
namespace {

using pagoda::v1::Generation;

// One received token: when, and the gap since the previous one (or since the
// request was sent, for the first token: the TTFT).
struct TokenEvent {
  double at_s;
  double gap_ms;
  bool first;
};

struct ClassLog {
  absl::Mutex mu;
  std::vector<TokenEvent> events ABSL_GUARDED_BY(mu);
  int errors ABSL_GUARDED_BY(mu) = 0;
};

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return NAN;
  std::sort(values.begin(), values.end());
  const size_t index = std::min(values.size() - 1, static_cast<size_t>(p * values.size()));
  return values[index];
}

pagoda::v1::GenerateRequest MakeRequest(int prompt_len, int max_tokens, int salt, int vocab,
                                        int priority = 0) {
  pagoda::v1::GenerateRequest request;
  request.set_priority(priority);
  for (int i = 0; i < prompt_len; ++i) {
    request.add_prompt_token_ids(
        3 + static_cast<int32_t>((int64_t{i} * 31 + int64_t{salt} * 7919) % (vocab - 3)));
  }
  request.mutable_stopping()->set_max_tokens(max_tokens);
  request.mutable_stopping()->set_ignore_eos(true);
  return request;
}

// Streams one request, logging each token's arrival relative to `start`.
void StreamOne(Generation::Stub& stub, const pagoda::v1::GenerateRequest& request,
               absl::Time start, ClassLog& log) {
  grpc::ClientContext context;
  const absl::Time sent = absl::Now();
  auto reader = stub.GenerateStream(&context, request);
  pagoda::v1::GenerateResponse response;
  absl::Time last = sent;
  bool first = true;
  std::vector<TokenEvent> events;
  while (reader->Read(&response)) {
    const absl::Time now = absl::Now();
    for (const auto& output : response.outputs()) {
      for (int t = 0; t < output.token_ids_size(); ++t) {
        events.push_back(TokenEvent{absl::ToDoubleSeconds(now - start),
                                    absl::ToDoubleMilliseconds(now - last), first});
        first = false;
        last = now;
      }
    }
  }
  const grpc::Status status = reader->Finish();
  if (!status.ok()) std::fprintf(stderr, "\npagoda-bench: %s\n", status.error_message().c_str());
  absl::MutexLock lock(&log.mu);
  log.events.insert(log.events.end(), events.begin(), events.end());
  if (!status.ok()) ++log.errors;
}

void DrawProgress(double elapsed, double duration) {
  constexpr int kWidth = 40;
  const int filled = static_cast<int>(kWidth * std::min(1.0, elapsed / duration));
  std::fprintf(stderr, "\r[%s%s] %5.1f / %.0f s", std::string(filled, '#').c_str(),
               std::string(kWidth - filled, ' ').c_str(), elapsed, duration);
  std::fflush(stderr);
}

// The class's first-token gaps (TTFTs) and later gaps (ITLs), in ms; returns
// its error count.
int SplitGaps(ClassLog& log, std::vector<double>& ttft, std::vector<double>& itl) {
  absl::MutexLock lock(&log.mu);
  for (const TokenEvent& event : log.events) (event.first ? ttft : itl).push_back(event.gap_ms);
  return log.errors;
}

void PrintClass(const char* name, ClassLog& log, double wall_s) {
  std::vector<double> ttft, itl;
  const int errors = SplitGaps(log, ttft, itl);
  std::printf("%-11s %7zu %6d %8.1f %8.1f %8.1f %8.2f %8.2f %8.2f %9.1f %9.2f %8.2f\n", name,
              ttft.size(), errors, Percentile(ttft, 0.5), Percentile(ttft, 0.9),
              Percentile(ttft, 0.99), Percentile(itl, 0.5), Percentile(itl, 0.9),
              Percentile(itl, 0.99), (ttft.size() + itl.size()) / wall_s, Percentile(itl, 0.999),
              Percentile(itl, 1.0));
}

// Issue 20's priority figure: the urgent requests' median TTFT under load
// over their median on the idle server. With the sample counts, since a
// median of a few dozen arrivals moves by tens of percent from run to run.
void PrintPriorityRatio(ClassLog& urgent, ClassLog& idle) {
  std::vector<double> loaded_ttft, idle_ttft, unused;
  SplitGaps(urgent, loaded_ttft, unused);
  SplitGaps(idle, idle_ttft, unused);
  std::printf(
      "priority: urgent TTFT p50 %.2f ms under load (%zu requests) / %.2f ms idle (%zu) = "
      "%.2fx\n",
      Percentile(loaded_ttft, 0.5), loaded_ttft.size(), Percentile(idle_ttft, 0.5),
      idle_ttft.size(), Percentile(loaded_ttft, 0.5) / Percentile(idle_ttft, 0.5));
}

// Inter-token gaps of the streams over time, long-prompt arrivals as lines.
void WritePlot(const std::string& path, ClassLog& streams, const std::vector<double>& arrivals,
               double duration) {
  absl::MutexLock lock(&streams.mu);
  double max_ms = 1;
  for (const TokenEvent& e : streams.events) {
    if (!e.first) max_ms = std::max(max_ms, e.gap_ms);
  }
  constexpr double kW = 900, kH = 400, kLeft = 60, kBottom = 40;
  std::string svg = absl::StrFormat(
      "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' "
      "font-family='sans-serif' font-size='12'>\n<rect width='100%%' height='100%%' "
      "fill='white'/>\n",
      kW + kLeft + 20, kH + kBottom + 20);
  auto x = [&](double s) { return kLeft + kW * s / duration; };
  auto y = [&](double ms) { return 10 + kH - kH * ms / max_ms; };
  for (double at : arrivals) {
    absl::StrAppendFormat(&svg, "<line x1='%.1f' y1='10' x2='%.1f' y2='%.0f' stroke='#f99'/>\n",
                          x(at), x(at), 10 + kH);
  }
  for (const TokenEvent& e : streams.events) {
    if (e.first || e.at_s > duration) continue;
    absl::StrAppendFormat(&svg, "<circle cx='%.1f' cy='%.1f' r='1' fill='#36c'/>\n", x(e.at_s),
                          y(e.gap_ms));
  }
  absl::StrAppendFormat(
      &svg,
      "<line x1='%.0f' y1='%.0f' x2='%.0f' y2='%.0f' stroke='black'/>\n"
      "<line x1='%.0f' y1='10' x2='%.0f' y2='%.0f' stroke='black'/>\n"
      "<text x='%.0f' y='%.0f'>time (s), 0 to %.0f; red: long prompt arrivals</text>\n"
      "<text x='5' y='20'>%.0f ms</text><text x='5' y='%.0f'>0</text>\n"
      "<text x='%.0f' y='25'>inter-token latency of the decoding streams</text>\n</svg>\n",
      kLeft, 10 + kH, kLeft + kW, 10 + kH, kLeft, kLeft, 10 + kH, kLeft, kH + kBottom, duration,
      max_ms, 10 + kH, kLeft + 10);
  std::ofstream(path) << svg;
}

// Requests of one class arriving at a fixed rate.
struct Arrivals {
  double every_s;
  int prompt_len;
  int max_tokens;
  int priority;
  int salt_base;
};

// Sends a request of `kind` every kind.every_s seconds until `end`, each on a
// thread of its own (returned), noting its arrival time.
std::vector<std::thread> SendEvery(Generation::Stub& stub, const Arrivals& kind, int vocab,
                                   absl::Time start, absl::Time end, ClassLog& log,
                                   std::vector<double>& arrivals) {
  const double duration = absl::ToDoubleSeconds(end - start);
  std::vector<std::thread> threads;
  for (int k = 0; kind.every_s > 0 && start + absl::Seconds(kind.every_s * (k + 1)) < end; ++k) {
    absl::SleepFor(start + absl::Seconds(kind.every_s * (k + 1)) - absl::Now());
    arrivals.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    threads.emplace_back([&stub, &log, kind, vocab, k, start] {
      StreamOne(stub,
                MakeRequest(kind.prompt_len, kind.max_tokens, kind.salt_base + k, vocab,
                            kind.priority),
                start, log);
    });
    DrawProgress(absl::ToDoubleSeconds(absl::Now() - start), duration);
  }
  return threads;
}

Arrivals LongPrompts() {
  return Arrivals{absl::GetFlag(FLAGS_mixed_long_every), absl::GetFlag(FLAGS_mixed_long_prompt),
                  absl::GetFlag(FLAGS_mixed_long_tokens), 0, 1'000'000};
}

Arrivals UrgentRequests() {
  return Arrivals{absl::GetFlag(FLAGS_mixed_urgent_every),
                  absl::GetFlag(FLAGS_mixed_urgent_prompt), 8,
                  absl::GetFlag(FLAGS_mixed_urgent_priority), 2'000'000};
}

// The urgent requests' TTFT on the idle server, before the load starts: the
// baseline their TTFT under load is judged against.
void MeasureIdle(Generation::Stub& stub, const Arrivals& urgent, int vocab, ClassLog& log) {
  // One uncounted request first, so the first measured one is not a cold
  // start's.
  ClassLog warm_up;
  StreamOne(stub, MakeRequest(urgent.prompt_len, urgent.max_tokens, 2'999'999, vocab), absl::Now(),
            warm_up);
  const int idle_requests = absl::GetFlag(FLAGS_mixed_urgent_idle_requests);
  for (int k = 0; k < idle_requests; ++k) {
    StreamOne(stub,
              MakeRequest(urgent.prompt_len, urgent.max_tokens, 3'000'000 + k, vocab,
                          urgent.priority),
              absl::Now(), log);
  }
}

// `count` streams, each re-sending its request as it finishes until `end`.
std::vector<std::thread> StartStreams(Generation::Stub& stub, int count, int vocab,
                                      absl::Time start, absl::Time end, ClassLog& log) {
  std::vector<std::thread> threads;
  for (int s = 0; s < count; ++s) {
    threads.emplace_back([&stub, &log, s, vocab, start, end] {
      for (int round = 0; absl::Now() < end; ++round) {
        StreamOne(stub,
                  MakeRequest(absl::GetFlag(FLAGS_mixed_context),
                              absl::GetFlag(FLAGS_mixed_stream_tokens), s * 1000 + round, vocab),
                  start, log);
      }
    });
  }
  return threads;
}

}  // namespace

bool MixedFlagsInRange() {
  const double every = absl::GetFlag(FLAGS_mixed_long_every);
  const double urgent_every = absl::GetFlag(FLAGS_mixed_urgent_every);
  const double duration = absl::GetFlag(FLAGS_mixed_duration);
  const int streams = absl::GetFlag(FLAGS_mixed_streams);
  const int urgent_priority = absl::GetFlag(FLAGS_mixed_urgent_priority);
  return streams >= 1 && streams <= 1024 && duration >= 1 && duration <= 3600 && every >= 0 &&
         urgent_every >= 0 && absl::GetFlag(FLAGS_mixed_context) >= 1 &&
         absl::GetFlag(FLAGS_mixed_long_prompt) >= 1 &&
         absl::GetFlag(FLAGS_mixed_urgent_prompt) >= 1 &&
         absl::GetFlag(FLAGS_mixed_urgent_idle_requests) >= 1 &&
         absl::GetFlag(FLAGS_mixed_urgent_idle_requests) <= 1000 &&
         absl::GetFlag(FLAGS_mixed_stream_tokens) >= 1 &&
         absl::GetFlag(FLAGS_mixed_long_tokens) >= 1 && urgent_priority >= -1'000'000 &&
         urgent_priority <= 1'000'000;
}

int RunMixedBench(Generation::Stub& stub, const pagoda::v1::ModelInfo& info) {
  const int streams = absl::GetFlag(FLAGS_mixed_streams);
  const double duration = absl::GetFlag(FLAGS_mixed_duration);
  const Arrivals long_prompts = LongPrompts();
  const Arrivals urgent = UrgentRequests();
  std::printf("mixed: %d streams (%d-token prompts), a %d-token prompt every %.1f s, %.0f s\n",
              streams, absl::GetFlag(FLAGS_mixed_context), long_prompts.prompt_len,
              long_prompts.every_s, duration);
  ClassLog stream_log, long_log, urgent_log, idle_log;
  if (urgent.every_s > 0) {
    std::printf("urgent: a %d-token prompt of priority %d every %.1f s\n", urgent.prompt_len,
                urgent.priority, urgent.every_s);
    MeasureIdle(stub, urgent, info.vocab_size(), idle_log);
  }
  std::vector<double> arrivals, urgent_arrivals;
  const absl::Time start = absl::Now();
  const absl::Time end = start + absl::Seconds(duration);
  std::vector<std::thread> threads =
      StartStreams(stub, streams, info.vocab_size(), start, end, stream_log);
  std::thread urgent_sender([&] {
    for (std::thread& t : SendEvery(stub, urgent, info.vocab_size(), start, end, urgent_log,
                                    urgent_arrivals)) {
      t.join();
    }
  });
  std::vector<std::thread> long_threads =
      SendEvery(stub, long_prompts, info.vocab_size(), start, end, long_log, arrivals);
  while (absl::Now() < end) {
    DrawProgress(absl::ToDoubleSeconds(absl::Now() - start), duration);
    absl::SleepFor(absl::Milliseconds(500));
  }
  for (std::thread& thread : threads) thread.join();
  for (std::thread& thread : long_threads) thread.join();
  urgent_sender.join();
  const double wall = absl::ToDoubleSeconds(absl::Now() - start);
  DrawProgress(duration, duration);
  std::fprintf(stderr, "\n");
  std::printf("%-11s %7s %6s %8s %8s %8s %8s %8s %8s %9s %9s %8s\n", "class", "requests", "errors",
              "ttft_p50", "ttft_p90", "ttft_p99", "itl_p50", "itl_p90", "itl_p99", "out_tok/s",
              "itl_p99.9", "itl_max");
  PrintClass("streams", stream_log, wall);
  PrintClass("long", long_log, wall);
  if (urgent.every_s > 0) {
    PrintClass("urgent", urgent_log, wall);
    PrintClass("urgent-idle", idle_log, wall);
    PrintPriorityRatio(urgent_log, idle_log);
  }
  const std::string plot = absl::GetFlag(FLAGS_mixed_plot);
  if (!plot.empty()) {
    WritePlot(plot, stream_log, arrivals, duration);
    std::printf("plot: %s\n", plot.c_str());
  }
  return 0;
}

}  // namespace pagoda::bench
