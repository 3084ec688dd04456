// pagoda-worker's main(): the worker process with no runner hooks, so no
// fault injection or other test change exists in a production build
// (worker/worker_process.h).
#include "worker/runner_factory.h"
#include "worker/worker_process.h"

int main(int argc, char** argv) {
  return pagoda::worker::RunWorkerProcess(argc, argv, pagoda::worker::RunnerHooks{});
}
