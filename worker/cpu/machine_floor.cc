#include "worker/cpu/machine_floor.h"

#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <thread>
#include <vector>

#include "worker/cpu/host_memory.h"
#include "worker/cpu/simd.h"

namespace pagoda::worker {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kReadBytes = size_t{256} << 20;
constexpr int kReadPasses = 5;

// Seconds for `threads` threads to run body(t) together (started together).
double TimeThreads(int threads, const std::function<void(int)>& body) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      body(t);
    });
  }
  while (ready.load() < threads) {
  }
  const auto start = Clock::now();
  go.store(true, std::memory_order_release);
  for (std::thread& thread : pool) thread.join();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double BestReadGbs(const float* data, size_t n, int threads) {
  const SimdKernels& simd = BestSimdKernels();
  std::vector<float> sums(threads);
  double best = 0;
  for (int pass = 0; pass < kReadPasses; ++pass) {
    const double seconds = TimeThreads(threads, [&](int t) {
      const size_t begin = n * t / threads, end = n * (t + 1) / threads;
      // a . a reads the range once (the second operand hits L1).
      sums[t] = simd.dot_f32(data + begin, data + begin, end - begin);
    });
    best = std::max(best, n * sizeof(float) / seconds / 1e9);
  }
  return best;
}

// 4 KiB pages: a private mapping with huge pages refused.
double SmallPagesGbs(int threads) {
  void* p = mmap(nullptr, kReadBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 0;
  madvise(p, kReadBytes, MADV_NOHUGEPAGE);
  auto* data = static_cast<float*>(p);
  std::fill_n(data, kReadBytes / sizeof(float), 1.0f);
  const double gbs = BestReadGbs(data, kReadBytes / sizeof(float), threads);
  munmap(p, kReadBytes);
  return gbs;
}

// As the weights: host_memory.h's placement, written, then collapsed.
double HugePagesGbs(int threads) {
  auto* data = static_cast<float*>(AllocateHost(kReadBytes));
  if (data == nullptr) return 0;
  std::fill_n(data, kReadBytes / sizeof(float), 1.0f);
  CollapseToHugePages(data, kReadBytes);
  const double gbs = BestReadGbs(data, kReadBytes / sizeof(float), threads);
  FreeHost(data, kReadBytes);
  return gbs;
}

// Twelve independent FMA chains hide the FMA latency on every x86 core; the
// values stay finite (a * 1 + 0); the empty asm keeps each FMA. Each returns
// the flops done.
__attribute__((target("avx2,fma"))) int64_t FmaAvx2Loop(int64_t iterations, float* sink) {
  __m256 acc[12];
  for (__m256& a : acc) a = _mm256_set1_ps(1.0f);
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (__m256& a : acc) {
      a = _mm256_fmadd_ps(a, one, zero);
      __asm__ volatile("" : "+x"(a));
    }
  }
  for (const __m256& a : acc) *sink += _mm256_cvtss_f32(a);
  return iterations * 12 * 8 * 2;
}

__attribute__((target("avx512f"))) int64_t FmaAvx512Loop(int64_t iterations, float* sink) {
  __m512 acc[12];
  for (__m512& a : acc) a = _mm512_set1_ps(1.0f);
  const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (__m512& a : acc) {
      a = _mm512_fmadd_ps(a, one, zero);
      __asm__ volatile("" : "+v"(a));
    }
  }
  for (const __m512& a : acc) *sink += _mm512_cvtss_f32(a);
  return iterations * 12 * 16 * 2;
}

}  // namespace

ReadBandwidth MeasureReadBandwidth(int threads) {
  ReadBandwidth bandwidth;
  bandwidth.small_pages_gbs = SmallPagesGbs(threads);
  bandwidth.huge_pages_gbs = HugePagesGbs(threads);
  return bandwidth;
}

double MeasureFmaPeakGflops(int threads) {
  const SimdLevel level = BestSimdLevel();
  if (level == SimdLevel::kPlain) return 0;
  constexpr int64_t kIterations = 20'000'000;
  std::vector<float> sinks(threads);
  std::vector<int64_t> flops(threads);
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const double seconds = TimeThreads(threads, [&](int t) {
      flops[t] = level == SimdLevel::kAvx512 ? FmaAvx512Loop(kIterations, &sinks[t])
                                             : FmaAvx2Loop(kIterations, &sinks[t]);
    });
    int64_t total = 0;
    for (int64_t f : flops) total += f;
    best = std::max(best, total / seconds / 1e9);
  }
  return best;
}

}  // namespace pagoda::worker
