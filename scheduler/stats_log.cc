#include "scheduler/stats_log.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "glog/logging.h"

namespace pagoda::scheduler {
namespace {

double PerSecond(int64_t count, double seconds) { return seconds > 0 ? count / seconds : 0; }

// vLLM's SpecDecodingLogging.log line, for an interval with drafts.
std::string SpecDecodeLine(const SpecDecodeTotals& before, const SpecDecodeTotals& now,
                           double seconds) {
  const int64_t drafts = now.num_drafts - before.num_drafts;
  const int64_t drafted = now.num_draft_tokens - before.num_draft_tokens;
  const int64_t accepted = now.num_accepted_tokens - before.num_accepted_tokens;
  std::vector<std::string> rates;
  for (size_t i = 0; i < now.accepted_per_pos.size(); ++i) {
    const int64_t earlier = i < before.accepted_per_pos.size() ? before.accepted_per_pos[i] : 0;
    rates.push_back(absl::StrFormat("%.3f", static_cast<double>(now.accepted_per_pos[i] - earlier) /
                                                static_cast<double>(drafts)));
  }
  const double acceptance = drafted > 0 ? 100.0 * accepted / drafted : std::nan("");
  return absl::StrFormat(
      "SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s, "
      "Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens, "
      "Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%",
      1.0 + static_cast<double>(accepted) / static_cast<double>(drafts),
      PerSecond(accepted, seconds), PerSecond(drafted, seconds), accepted, drafted,
      absl::StrJoin(rates, ", "), acceptance);
}

}  // namespace

std::vector<std::string> StatsLogLines(const EngineSnapshot& before, const EngineSnapshot& now,
                                       double seconds, bool previous_active) {
  const int64_t prompt = now.prompt_tokens_total - before.prompt_tokens_total;
  const int64_t generated = now.generation_tokens_total - before.generation_tokens_total;
  if (prompt == 0 && generated == 0 && !previous_active) return {};
  const int64_t queries = now.prefix_cache_queries_total - before.prefix_cache_queries_total;
  const int64_t hits = now.prefix_cache_hits_total - before.prefix_cache_hits_total;
  const double kv_usage =
      now.num_gpu_blocks > 0
          ? 100.0 * (now.num_gpu_blocks - now.free_gpu_blocks) / now.num_gpu_blocks
          : 0;
  std::vector<std::string> lines = {absl::StrFormat(
      "Engine 000: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f "
      "tokens/s, Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, Prefix cache "
      "hit rate: %.1f%%",
      PerSecond(prompt, seconds), PerSecond(generated, seconds), now.num_running, now.num_waiting,
      kv_usage, queries > 0 ? 100.0 * hits / queries : 0.0)};
  if (now.spec_decode.num_drafts > before.spec_decode.num_drafts) {
    lines.push_back(SpecDecodeLine(before.spec_decode, now.spec_decode, seconds));
  }
  return lines;
}

StatsLog::StatsLog(const Engine* engine, absl::Duration interval)
    : engine_(engine), interval_(interval), thread_([this] { Run(); }) {}

StatsLog::~StatsLog() {
  stop_.Notify();
  thread_.join();
}

void StatsLog::Run() {
  EngineSnapshot before = engine_->snapshot();
  absl::Time since = absl::Now();
  bool previous_active = false;
  while (!stop_.WaitForNotificationWithTimeout(interval_)) {
    const EngineSnapshot now = engine_->snapshot();
    const absl::Time at = absl::Now();
    for (const std::string& line :
         StatsLogLines(before, now, absl::ToDoubleSeconds(at - since), previous_active)) {
      LOG(INFO) << line;
    }
    previous_active = now.prompt_tokens_total != before.prompt_tokens_total ||
                      now.generation_tokens_total != before.generation_tokens_total;
    before = now;
    since = at;
  }
}

}  // namespace pagoda::scheduler
