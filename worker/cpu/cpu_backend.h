#ifndef PAGODA_WORKER_CPU_CPU_BACKEND_H_
#define PAGODA_WORKER_CPU_CPU_BACKEND_H_

#include <memory>

#include "worker/backend.h"

namespace pagoda::worker {

// The f32 host backend: OpenBLAS for Linear, plain loops elsewhere, attention
// parallelised over (sequence, kv head) pairs with short-lived threads.
// Buffers are host memory, so Upload/Download are memcpy.
std::unique_ptr<Backend> CreateCpuBackend();

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CPU_CPU_BACKEND_H_
