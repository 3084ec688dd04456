#ifndef PAGODA_TESTS_SUPPORT_RUNNER_TEST_MODEL_H_
#define PAGODA_TESTS_SUPPORT_RUNNER_TEST_MODEL_H_

// For the model-runner tests: a tiny random Llama (2 layers, hidden 32, 4
// heads, 2 KV heads, f32) made by scripts/make_tiny_model.py in a fresh
// temporary folder, and a CPU runner over it with its KV cache allocated.
// Header-only, like the other helpers the worker's tests share.

#include <stdlib.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/cpu/cpu_model_runner.h"
#include "worker/model_runner.h"

namespace pagoda::worker {

// Makes the model under a new folder /tmp/<tag>_XXXXXX and returns that
// folder (the model is its "model" subfolder); "" after a failure, which is
// also reported to gtest. The caller removes the folder.
inline std::string MakeRunnerTestModel(const std::string& tag, int vocab_size, int seed) {
  auto env = [](const char* name, const char* fallback) {
    const char* value = std::getenv(name);
    return std::string(value != nullptr ? value : fallback);
  };
  std::string pattern = absl::StrCat("/tmp/", tag, "_XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp " << pattern;
    return "";
  }
  const std::string command = absl::StrCat(
      env("PAGODA_PYTHON3", "/usr/bin/python3"), " ", env("PAGODA_SOURCE_DIR", "."),
      "/scripts/make_tiny_model.py --out ", pattern, "/model --arch llama --vocab-size ",
      vocab_size,
      " --hidden-size 32 --intermediate-size 48 --num-layers 2 --num-heads 4 --num-kv-heads 2"
      " --max-position-embeddings 64 --dtype f32 --seed ",
      seed, " > /dev/null");
  if (std::system(command.c_str()) != 0) {
    ADD_FAILURE() << command;
    return "";
  }
  return pattern;
}

// A CPU runner with `dir`'s model loaded and `num_gpu_blocks` KV blocks of
// `block_size` tokens; load or cache failures are reported to gtest.
inline std::unique_ptr<ModelRunner> ReadyCpuRunner(const std::string& dir, int block_size,
                                                   int num_gpu_blocks) {
  auto runner = CreateCpuModelRunner();
  v1::LoadModelRequest load;
  load.set_model_dir(dir + "/model");
  load.set_block_size(block_size);
  load.set_device("cpu");
  load.set_world_size(1);
  load.set_kv_cache_memory_bytes(int64_t{1} << 20);
  EXPECT_TRUE(runner->LoadModel(load).ok());
  v1::InitCacheRequest init;
  init.set_num_gpu_blocks(num_gpu_blocks);
  EXPECT_TRUE(runner->InitCache(init).ok());
  return runner;
}

}  // namespace pagoda::worker

#endif  // PAGODA_TESTS_SUPPORT_RUNNER_TEST_MODEL_H_
