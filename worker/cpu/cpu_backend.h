#ifndef PAGODA_WORKER_CPU_CPU_BACKEND_H_
#define PAGODA_WORKER_CPU_CPU_BACKEND_H_

#include <memory>

#include "worker/backend.h"

namespace pagoda::worker {

// The host backend. One persistent ThreadPool of `num_threads` threads
// (0: every CPU the process may use) runs the GEMMs, attention and
// element-wise ops; OpenBLAS is held to one thread so the pools never fight.
// Linear streams each weight row once through runtime-dispatched SIMD dot
// products (AVX-512 / AVX2+FMA / plain) for decode-sized batches, and splits
// larger ones into per-thread OpenBLAS GEMMs over output-row tiles (f16/bf16
// tiles widened to f32 in a per-thread scratch first). Buffers are host
// memory, so uploads and downloads are memcpy. Activations are f32; the KV
// cache may be f32, bf16 or f16 (written rounded to nearest even by SIMD
// narrowing, read by SIMD dot products and axpys that widen to f32). Sample
// runs worker/sampler.h's SampleRow, one row per task.
std::unique_ptr<Backend> CreateCpuBackend(int num_threads = 0);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CPU_CPU_BACKEND_H_
