#include "bench/cpu/machine_floor.h"

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

// Four times this VM's 300 MiB L3 (and past any other LLC we run on): the
// probe must stream from memory, as the weights it is the floor of do. At
// 256 MiB it fitted the L3.
constexpr size_t kReadBytes = size_t{1} << 30;
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
// values stay finite (a * 1 + 0), and the empty asm keeps every FMA. The
// chains are named locals, not an array: through an array GCC stored each
// chain back to the stack on every iteration, and twelve 32-byte stores an
// iteration held the loop to the store port's rate (the "peak" came out at
// a third of what the GEMM itself reached). Each returns the flops done.
__attribute__((target("avx2,fma"))) int64_t FmaAvx2Loop(int64_t iterations, float* sink) {
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  __m256 a0 = one, a1 = one, a2 = one, a3 = one, a4 = one, a5 = one, a6 = one, a7 = one, a8 = one,
         a9 = one, a10 = one, a11 = one;
  for (int64_t i = 0; i < iterations; ++i) {
    a0 = _mm256_fmadd_ps(a0, one, zero);
    a1 = _mm256_fmadd_ps(a1, one, zero);
    a2 = _mm256_fmadd_ps(a2, one, zero);
    a3 = _mm256_fmadd_ps(a3, one, zero);
    a4 = _mm256_fmadd_ps(a4, one, zero);
    a5 = _mm256_fmadd_ps(a5, one, zero);
    a6 = _mm256_fmadd_ps(a6, one, zero);
    a7 = _mm256_fmadd_ps(a7, one, zero);
    a8 = _mm256_fmadd_ps(a8, one, zero);
    a9 = _mm256_fmadd_ps(a9, one, zero);
    a10 = _mm256_fmadd_ps(a10, one, zero);
    a11 = _mm256_fmadd_ps(a11, one, zero);
    __asm__ volatile(""
                     : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6),
                       "+x"(a7), "+x"(a8), "+x"(a9), "+x"(a10), "+x"(a11));
  }
  *sink += _mm256_cvtss_f32(
      _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                                  _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7))),
                    _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11))));
  return iterations * 12 * 8 * 2;
}

__attribute__((target("avx512f"))) int64_t FmaAvx512Loop(int64_t iterations, float* sink) {
  const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  __m512 a0 = one, a1 = one, a2 = one, a3 = one, a4 = one, a5 = one, a6 = one, a7 = one, a8 = one,
         a9 = one, a10 = one, a11 = one;
  for (int64_t i = 0; i < iterations; ++i) {
    a0 = _mm512_fmadd_ps(a0, one, zero);
    a1 = _mm512_fmadd_ps(a1, one, zero);
    a2 = _mm512_fmadd_ps(a2, one, zero);
    a3 = _mm512_fmadd_ps(a3, one, zero);
    a4 = _mm512_fmadd_ps(a4, one, zero);
    a5 = _mm512_fmadd_ps(a5, one, zero);
    a6 = _mm512_fmadd_ps(a6, one, zero);
    a7 = _mm512_fmadd_ps(a7, one, zero);
    a8 = _mm512_fmadd_ps(a8, one, zero);
    a9 = _mm512_fmadd_ps(a9, one, zero);
    a10 = _mm512_fmadd_ps(a10, one, zero);
    a11 = _mm512_fmadd_ps(a11, one, zero);
    __asm__ volatile(""
                     : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6),
                       "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
  }
  *sink += _mm512_cvtss_f32(
      _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                                  _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7))),
                    _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11))));
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
