#ifndef PAGODA_WORKER_CPU_THREAD_POOL_H_
#define PAGODA_WORKER_CPU_THREAD_POOL_H_

// ThreadPool: the CPU worker's one persistent pool of threads that every
// linear, attention and element-wise op runs on, and the CPUs it may use.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pagoda::worker {

// The number of CPUs this process may run on (sched_getaffinity), at least 1.
// Unlike hardware_concurrency it honours taskset and cgroup cpusets.
int AvailableCpuCount();

// The name of a pool's worker threads: the prefix and the thread's index
// (1 to num_threads - 1; 0 is the caller's, which keeps its own name).
inline constexpr char kWorkerNamePrefix[] = "pagoda-cpu-";

// One persistent pool for the whole worker: GEMMs, attention and element-wise
// ops all run on it, so no op spawns threads and no two pools fight for the
// cores. The calling thread takes part in every ParallelFor, so a pool of N
// threads starts N - 1 workers.
//
// Idle workers spin for about half a millisecond (a step issues dozens of
// ParallelFors a few microseconds apart, and the next step follows within a
// fraction of a millisecond; waking a sleeping thread costs more than the
// work), yielding now and then, then sleep on a condition variable, so an
// idle worker costs no CPU. Handing out a
// task takes no lock unless a worker sleeps: a spinning worker that had to
// take a mutex the caller holds would sleep in the kernel, and the caller
// would do its share of the work alone.
//
// Thread safety: ParallelFor is for one caller at a time. A ParallelFor called
// from inside a task runs inline on the calling worker (no nesting deadlock).
class ThreadPool {
 public:
  // REQUIRES: num_threads >= 1.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over disjoint ranges covering [0, n) exactly once,
  // each range at least `grain` long (except the last), and returns when all
  // calls have returned. Ranges are handed out dynamically, a share of what
  // is left at a time (large first, `grain` at the end), so a thread slowed
  // by other processes takes fewer of them and none waits long for the last.
  // n <= grain runs inline.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop();
  void RunChunks();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> generation_{0};
  // Workers inside (or entering) wake_.wait. Sequentially consistent with
  // generation_: a caller that reads 0 after publishing a generation knows
  // every worker about to sleep will see that generation first.
  std::atomic<int> sleepers_{0};
  // Who is inside the current task: generation (high 32 bits), a closed flag
  // (bit 31) and the number of workers running chunks (low bits). Workers
  // join only an open task of their generation, and the caller closes it once
  // no worker is inside, so it never waits for a worker that a busy machine
  // has not scheduled yet: late workers find the task closed and skip it.
  std::atomic<uint64_t> task_state_{0};
  // The current task; written only while no worker is running a task.
  const std::function<void(int64_t, int64_t)>* task_ = nullptr;
  int64_t task_size_ = 0;
  int64_t grain_ = 1;
  std::atomic<int64_t> next_index_{0};  // Start of the next range to hand out.
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CPU_THREAD_POOL_H_
