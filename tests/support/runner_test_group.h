#ifndef PAGODA_TESTS_SUPPORT_RUNNER_TEST_GROUP_H_
#define PAGODA_TESTS_SUPPORT_RUNNER_TEST_GROUP_H_

// For the worker's tensor-parallel tests: two CPU runners in one process
// forming a real two-rank group (TCP collectives through a rendezvous
// store), loaded together (the join needs both ranks at once), and a step
// run on both at once. Header-only, like runner_test_model.h.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "wire/rendezvous_store_server.h"
#include "wire/worker_secret.h"
#include "worker/cpu/cpu_model_runner.h"
#include "worker/model_runner.h"

namespace pagoda::worker {

class TwoRankCpuGroup {
 public:
  // What one rank's load answered (or why it failed).
  struct Loaded {
    std::vector<std::unique_ptr<ModelRunner>> ranks;  // Empty after a failed load.
    std::vector<absl::Status> status{2};
    std::vector<v1::LoadModelResponse> responses{2};
  };

  // Starts the rendezvous store; a failure is reported to gtest.
  TwoRankCpuGroup() {
    wire::RendezvousStoreServer::Options options;
    options.secret = GenerateWorkerSecret().value();
    secret_ = options.secret;
    auto store = wire::RendezvousStoreServer::Start(options);
    EXPECT_TRUE(store.ok()) << store.status();
    if (store.ok()) store_ = *std::move(store);
  }

  // Both ranks of a fresh group (joined under `prefix`) over `model_dir`,
  // one CPU thread each, with `num_gpu_blocks` KV blocks of `block_size`
  // tokens; `configure`, when given, adds to each rank's load request.
  Loaded Load(const std::string& model_dir, const std::string& prefix, int block_size,
              int num_gpu_blocks,
              const std::function<void(v1::LoadModelRequest&)>& configure = nullptr) {
    Loaded loaded;
    if (store_ == nullptr) return loaded;
    std::vector<std::unique_ptr<ModelRunner>> ranks(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      ranks[r] = CreateCpuModelRunner();
      threads.emplace_back([&, r] {
        v1::LoadModelRequest load;
        load.set_model_dir(model_dir);
        load.set_block_size(block_size);
        load.set_device("cpu");
        load.set_cpu_threads(1);
        load.set_kv_cache_memory_bytes(int64_t{1} << 20);
        load.set_rank(r);
        load.set_world_size(2);
        load.set_rendezvous_address(absl::StrCat("127.0.0.1:", store_->port()));
        load.set_rendezvous_secret(secret_);
        load.set_rendezvous_prefix(prefix);
        load.set_collective_timeout_ms(20000);
        if (configure) configure(load);
        absl::StatusOr<v1::LoadModelResponse> response = ranks[r]->LoadModel(load);
        loaded.status[r] = response.status();
        if (!response.ok()) return;
        loaded.responses[r] = *response;
        v1::InitCacheRequest init;
        init.set_num_gpu_blocks(num_gpu_blocks);
        loaded.status[r] = ranks[r]->InitCache(init);
      });
    }
    for (std::thread& thread : threads) thread.join();
    if (loaded.status[0].ok() && loaded.status[1].ok()) loaded.ranks = std::move(ranks);
    return loaded;
  }

  // `plan` on both ranks at once; rank 0's result. Rank 1 must succeed and
  // return no tokens (only rank 0 samples).
  static absl::StatusOr<v1::StepResult> RunOnBoth(std::vector<std::unique_ptr<ModelRunner>>& ranks,
                                                  const v1::StepPlan& plan) {
    absl::StatusOr<v1::StepResult> rank1 = absl::UnknownError("not run");
    std::thread other([&] { rank1 = ranks[1]->ExecuteStep(plan); });
    absl::StatusOr<v1::StepResult> rank0 = ranks[0]->ExecuteStep(plan);
    other.join();
    EXPECT_TRUE(rank1.ok()) << rank1.status();
    if (rank1.ok()) {
      EXPECT_EQ(rank1->tokens_size(), 0);
    }
    return rank0;
  }

 private:
  std::string secret_;
  std::unique_ptr<wire::RendezvousStoreServer> store_;
};

}  // namespace pagoda::worker

#endif  // PAGODA_TESTS_SUPPORT_RUNNER_TEST_GROUP_H_
