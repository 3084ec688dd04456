#include "worker/cpu/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace pagoda::worker {
namespace {

// Set on pool workers, so nested ParallelFors run inline.
thread_local bool in_pool_task = false;

// Polls before sleeping: about half a millisecond (a pause is 10-140 cycles,
// 25 ns on the benchmark machine), longer than the gap between two decode
// steps while the server takes in a result and sends the next plan. A worker
// that slept there made every step start by waiting for the kernel to wake it
// (a batch-1 step was 5% slower with a 50 us spin). Every kYieldEvery polls
// it offers the core to any other runnable thread.
constexpr int kSpinIterations = 20000;
constexpr int kYieldEvery = 2000;
constexpr uint64_t kClosed = uint64_t{1} << 31;
constexpr uint64_t kCountMask = kClosed - 1;

inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

}  // namespace

int AvailableCpuCount() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 1; i < std::max(1, num_threads); ++i) {
    workers_.emplace_back([this, i] {
      // Named, or they inherit the name of whichever thread made the pool
      // (a gRPC handler's), and profiles and top misname the compute.
      pthread_setname_np(pthread_self(),
                         (kWorkerNamePrefix + std::to_string(i)).substr(0, 15).c_str());
      WorkerLoop();
    });
  }
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

// Guided self-scheduling: each grab takes a share of what is left, so chunks
// start large (few grabs) and shrink to `grain` at the end, where the threads
// would otherwise wait on whichever holds the last big chunk. At batch 1
// every matrix of a step is one such task, and the tail wait was a tenth of
// the step.
void ThreadPool::RunChunks() {
  const int64_t divisor = 2 * num_threads();
  int64_t begin = next_index_.load(std::memory_order_relaxed);
  while (begin < task_size_) {
    const int64_t end =
        std::min(task_size_, begin + std::max(grain_, (task_size_ - begin) / divisor));
    if (next_index_.compare_exchange_weak(begin, end, std::memory_order_relaxed)) {
      (*task_)(begin, end);
      begin = next_index_.load(std::memory_order_relaxed);
    }
  }
}

void ThreadPool::WorkerLoop() {
  in_pool_task = true;
  uint64_t seen = 0;
  for (;;) {
    uint64_t current = generation_.load(std::memory_order_acquire);
    for (int i = 1; current == seen && i <= kSpinIterations; ++i) {
      CpuRelax();
      if (i % kYieldEvery == 0) std::this_thread::yield();
      current = generation_.load(std::memory_order_acquire);
    }
    if (current == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      sleepers_.fetch_add(1);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
      sleepers_.fetch_sub(1);
      current = generation_.load();
    }
    seen = current;
    if (stop_.load(std::memory_order_acquire)) return;
    uint64_t state = task_state_.load(std::memory_order_acquire);
    const uint64_t generation_tag = (current & 0xffffffffu) << 32;
    bool joined = false;
    while ((state & ~kCountMask & ~kClosed) == generation_tag && (state & kClosed) == 0) {
      if (task_state_.compare_exchange_weak(state, state + 1, std::memory_order_acq_rel)) {
        joined = true;
        break;
      }
    }
    if (!joined) continue;
    RunChunks();
    task_state_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (workers_.empty() || n <= grain || in_pool_task) {
    fn(0, n);
    return;
  }
  task_ = &fn;
  task_size_ = n;
  grain_ = grain;
  next_index_.store(0, std::memory_order_relaxed);
  const uint64_t generation = generation_.load(std::memory_order_relaxed) + 1;
  task_state_.store((generation & 0xffffffffu) << 32, std::memory_order_release);
  generation_.store(generation);  // Sequentially consistent with sleepers_.
  if (sleepers_.load() > 0) {
    // Taking the mutex orders this wake after a sleeper's check of the
    // generation, so it cannot be lost between the check and the wait.
    { std::lock_guard<std::mutex> lock(mutex_); }
    wake_.notify_all();
  }
  in_pool_task = true;
  RunChunks();
  in_pool_task = false;
  // Close the task once no worker is inside it; after that none can join,
  // so task_ may be replaced.
  uint64_t state = task_state_.load(std::memory_order_acquire);
  for (int i = 0;; ++i) {
    if ((state & kCountMask) == 0 &&
        task_state_.compare_exchange_weak(state, state | kClosed, std::memory_order_acq_rel)) {
      break;
    }
    if (i < kYieldEvery) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
    state = task_state_.load(std::memory_order_acquire);
  }
}

}  // namespace pagoda::worker
