#ifndef PAGODA_WORKER_WORKER_PROCESS_H_
#define PAGODA_WORKER_WORKER_PROCESS_H_

// pagoda-worker's whole process behind its main(): flags, the server's
// secret, the Worker service and its step channel, metrics, and the stop on a
// Shutdown RPC, a signal or the parent's death (worker/worker_process.cc
// says what each does). Its one rule: the runner hooks come in from main(),
// never from what is linked: pagoda-worker (worker/worker_main.cc) passes
// none, a test build passes its own (tests/fakes/fault_injecting_worker_main.cc).

#include "worker/runner_factory.h"

namespace pagoda::worker {

// Runs the worker until it is told to stop; returns the process's exit code.
int RunWorkerProcess(int argc, char** argv, const RunnerHooks& hooks);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_WORKER_PROCESS_H_
