#ifndef PAGODA_BENCH_CPU_MACHINE_FLOOR_H_
#define PAGODA_BENCH_CPU_MACHINE_FLOOR_H_

// What this machine can do at best, measured in the benchmark's own run, so
// a benchmark prints each figure as a fraction of its floor (the least time
// the work could take): bytes streamed from memory against the read
// bandwidth, multiply-adds against the FMA peak. Benchmarks only.

namespace pagoda::worker {

// GB/s of `threads` threads each summing its share of a 256 MiB buffer (far
// larger than the caches) with the worker's own SIMD dot product, best of a
// few passes, on each kind of page: buffers from host_memory.h (2 MiB pages
// where the kernel grants them, as the weights) and plain 4 KiB pages.
struct ReadBandwidth {
  double huge_pages_gbs = 0;
  double small_pages_gbs = 0;
  double best() const {
    return huge_pages_gbs > small_pages_gbs ? huge_pages_gbs : small_pages_gbs;
  }
};
ReadBandwidth MeasureReadBandwidth(int threads);

// GFLOP/s (a multiply-add counts two) of `threads` threads running
// independent vector FMAs on registers at the best SIMD level: the compute
// ceiling of a matrix product.
double MeasureFmaPeakGflops(int threads);

}  // namespace pagoda::worker

#endif  // PAGODA_BENCH_CPU_MACHINE_FLOOR_H_
