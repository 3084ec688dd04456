// bench_kv_events: what publishing KV events costs the engine thread per
// step with 256 running sequences. The scheduler's CPU work of a step
// (Schedule, appending sampled tokens, prefix-cache commits, freeing, the
// same as bench_scheduler's BM_SchedulerStep) runs over one workload twice,
// KV events off and on; "on" also drains the block manager's events and
// hands them to a real KvEventPublisher whose PUB socket feeds a subscriber
// thread. Requests share prompt prefixes, finish at random lengths and are
// replaced, in a pool small enough that cached blocks are evicted, so every
// event kind is on the path. Prints both step times, the difference, the
// part spent handing batches over, and the publisher thread's own encode +
// send time per batch (another core).
//   bench_kv_events [--seqs 256] [--steps 5000] [--record-only 1]
#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "bench/common/bench_flags.h"
#include "common/flag_checks.h"
#include "scheduler/engine/output_processor.h"
#include "scheduler/engine/scheduler.h"
#include "scheduler/kv_events/publisher.h"

ABSL_FLAG(int, seqs, 256, "Running sequences.");
ABSL_FLAG(int, steps, 5000, "Steps of each run (off and on).");
// An int, not a bool: the documented spelling is "--record-only 1".
ABSL_FLAG(int, record_only, 0,
          "1: events recorded and taken, never handed to the publisher (the block manager's "
          "share alone).");

namespace pagoda::scheduler {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kBlockSize = 16;

double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

// Adds requests until `num_seqs` are unfinished: prompts are one of eight
// 256-token prefixes plus up to 256 tokens of their own.
void TopUp(Scheduler& scheduler, int num_seqs, std::mt19937& rng, int64_t& next_id) {
  while (scheduler.num_running() + scheduler.num_waiting() + scheduler.num_swapped() < num_seqs) {
    std::vector<int32_t> prompt(256 + rng() % 256);
    const int prefix = static_cast<int>(rng() % 8);
    for (size_t i = 0; i < prompt.size(); ++i) {
      prompt[i] = i < 256 ? prefix * 1000 + static_cast<int>(i) : static_cast<int>(rng() % 32000);
    }
    StoppingOptions stopping;
    stopping.max_tokens = 16 + static_cast<int>(rng() % 240);
    stopping.ignore_eos = true;
    scheduler.AddSequenceGroup(std::make_unique<SequenceGroup>(
        "r" + std::to_string(next_id), std::move(prompt), next_id, SamplingOptions{}, stopping,
        absl::UnixEpoch() + absl::Microseconds(next_id)));
    ++next_id;
  }
}

// One scheduler and its workload; Step() runs one step and returns its
// time in microseconds, events work included.
class Sim {
 public:
  Sim(int num_seqs, KvEventPublisher* publisher, bool publish)
      : num_seqs_(num_seqs), publisher_(publisher), publish_(publish),
        scheduler_(MakeConfig(num_seqs)),
        processor_({}, MakeConfig(num_seqs).max_model_len, &scheduler_) {
    if (publisher_ != nullptr) scheduler_.block_manager().EnableKvEvents();
  }

  double Step() {
    TopUp(scheduler_, num_seqs_, rng_, next_id_);
    const Clock::time_point start = Clock::now();
    SchedulerOutput output = scheduler_.Schedule();
    const size_t samples = std::count_if(output.scheduled.begin(), output.scheduled.end(),
                                         [](const ScheduledSequence& s) { return s.do_sample; });
    std::vector<GeneratedToken> sampled(samples, GeneratedToken{7, -1.0f, {}});
    processor_.Process(output, sampled);
    scheduler_.CommitComputedBlocks(output);
    scheduler_.FreeFinished();
    Clock::duration untimed{};  // Keeping a sample batch: not the engine's work.
    if (publisher_ != nullptr) {
      const Clock::time_point t0 = Clock::now();
      // What Engine::PublishKvEvents does.
      scheduler_.block_manager().SwapKvEvents(events_buffer_);
      const Clock::time_point t1 = Clock::now();
      events_ += static_cast<int64_t>(events_buffer_.size());
      if (sample_.size() < 200 && steps_ % 10 == 0 && !events_buffer_.empty()) {
        sample_.push_back(events_buffer_);
      }
      const Clock::time_point t2 = Clock::now();
      if (!events_buffer_.empty() && publish_) publisher_->TryPublish(events_buffer_);
      events_buffer_.Clear();
      const Clock::time_point t3 = Clock::now();
      handoff_us_.push_back(Micros((t1 - t0) + (t3 - t2)));
      untimed = t2 - t1;
    }
    ++steps_;
    return Micros(Clock::now() - start - untimed);
  }

  const std::vector<double>& handoff_us() const { return handoff_us_; }
  int64_t events() const { return events_; }
  const std::vector<KvEventBatch>& sample() const { return sample_; }

 private:
  static SchedulerConfig MakeConfig(int num_seqs) {
    SchedulerConfig config;
    config.block_size = kBlockSize;
    // Room for the running set and a little cache: evictions happen.
    config.num_gpu_blocks = num_seqs * (512 + 256) / kBlockSize / 2;
    config.max_num_seqs = num_seqs;
    config.max_num_batched_tokens = 8192;
    config.max_model_len = 4096;
    config.enable_chunked_prefill = true;
    return config;
  }

  const int num_seqs_;
  KvEventPublisher* const publisher_;
  const bool publish_;
  Scheduler scheduler_;
  OutputProcessor processor_;
  std::mt19937 rng_{1234};
  int64_t next_id_ = 0;
  int64_t steps_ = 0;
  int64_t events_ = 0;
  std::vector<double> handoff_us_;
  std::vector<KvEventBatch> sample_;
  KvEventBatch events_buffer_;
};

double Median(std::vector<double> values) {
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

// A subscriber on a thread of its own, so that the PUB socket really sends.
class Subscriber {
 public:
  Subscriber() : context_(zmq_ctx_new()), socket_(zmq_socket(context_, ZMQ_SUB)) {
    zmq_setsockopt(socket_, ZMQ_SUBSCRIBE, "", 0);
    const int timeout_ms = 100;
    zmq_setsockopt(socket_, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
    zmq_bind(socket_, "tcp://127.0.0.1:*");
    char endpoint[256];
    size_t size = sizeof(endpoint);
    zmq_getsockopt(socket_, ZMQ_LAST_ENDPOINT, endpoint, &size);
    endpoint_ = endpoint;
    reader_ = std::thread([this] {
      char buffer[1 << 16];
      while (running_) {
        if (zmq_recv(socket_, buffer, sizeof(buffer), 0) >= 0) ++frames_;
      }
    });
  }
  ~Subscriber() {
    running_ = false;
    reader_.join();
    zmq_close(socket_);
    zmq_ctx_term(context_);
  }
  const std::string& endpoint() const { return endpoint_; }
  int64_t messages() const { return frames_ / 3; }

 private:
  void* context_;
  void* socket_;
  std::string endpoint_;
  std::atomic<bool> running_{true};
  std::atomic<int64_t> frames_{0};
  std::thread reader_;
};

struct Measured {
  double off_us, on_us, diff_us;
};

// Both schedulers step in lockstep over the same workload, so load from
// other processes falls on both alike; medians of the steady state (the
// first steps fill the batch). Which goes first alternates: the second of a
// pair runs on caches the first warmed for its own data.
Measured Measure(Sim& off, Sim& on, int steps) {
  std::vector<double> off_us, on_us, diff_us;
  for (int step = 0; step < steps; ++step) {
    double a, b;
    if (step % 2 == 0) {
      a = off.Step();
      b = on.Step();
    } else {
      b = on.Step();
      a = off.Step();
    }
    if (step < steps / 5) continue;
    off_us.push_back(a);
    on_us.push_back(b);
    diff_us.push_back(b - a);
  }
  return Measured{Median(off_us), Median(on_us), Median(diff_us)};
}

void Report(int num_seqs, int steps, bool publish, const Measured& m, const Sim& on) {
  const double handoff =
      std::accumulate(on.handoff_us().begin(), on.handoff_us().end(), 0.0) / steps;
  const Clock::time_point start = Clock::now();
  size_t bytes = 0;
  for (const auto& batch : on.sample()) bytes += KvEventPublisher::EncodeBatch(0, batch, 0).size();
  const size_t sampled = std::max<size_t>(1, on.sample().size());
  const double encode_us = Micros(Clock::now() - start) / sampled;
  std::printf("bench_kv_events: %d running sequences, %d steps (medians after the first %d)%s\n",
              num_seqs, steps, steps / 5, publish ? "" : ", record only");
  std::printf("  scheduler step, KV events off: %8.1f us\n", m.off_us);
  std::printf("  scheduler step, KV events on:  %8.1f us\n", m.on_us);
  std::printf("  paired difference (on - off):  %8.2f us  (%.2f%% of the step)\n", m.diff_us,
              100.0 * m.diff_us / m.off_us);
  std::printf("  of which SwapKvEvents + TryPublish: %.2f us/step (mean, %.2f%%)\n", handoff,
              100.0 * handoff / m.off_us);
  std::printf("  %.1f events per step; the publisher thread encodes a batch in %.1f us "
              "(%zu bytes)\n",
              static_cast<double>(on.events()) / steps, encode_us, bytes / sampled);
}

int Main(int argc, char** argv) {
  bench::ParseBenchCommandLine(
      argc, argv,
      {"bench_kv_events", "bench_kv_events [--seqs N] [--steps N] [--record-only 0|1]"});
  const int num_seqs = absl::GetFlag(FLAGS_seqs);
  const int steps = absl::GetFlag(FLAGS_steps);
  const int record_only = absl::GetFlag(FLAGS_record_only);
  bench::CheckFlags("bench_kv_events", {flag_check::Range("seqs", num_seqs, 1, 4096),
                                        flag_check::Range("steps", steps, 1, 10'000'000),
                                        flag_check::Range("record-only", record_only, 0, 1)});
  const bool publish = record_only == 0;
  Subscriber subscriber;
  KvEventPublisherOptions options;
  options.endpoint = subscriber.endpoint();
  options.topic = "kv@bench@model";
  std::unique_ptr<KvEventPublisher> publisher = *KvEventPublisher::Start(options);
  Sim off(num_seqs, nullptr, false);
  Sim on(num_seqs, publisher.get(), publish);
  const Measured measured = Measure(off, on, steps);
  Report(num_seqs, steps, publish, measured, on);
  publisher.reset();  // Sends what is queued.
  absl::SleepFor(absl::Milliseconds(200));
  std::printf("  the subscriber received %lld batches\n",
              static_cast<long long>(subscriber.messages()));
  return 0;
}

}  // namespace
}  // namespace pagoda::scheduler

int main(int argc, char** argv) { return pagoda::scheduler::Main(argc, argv); }
