# pagoda_worker_core: the CPU Llama forward over a paged KV cache, sampling and
# the ModelRunner (no gRPC), plus their unit tests.
add_library(pagoda_worker_core STATIC
  ${CMAKE_CURRENT_LIST_DIR}/backend.cc
  ${CMAKE_CURRENT_LIST_DIR}/batch.cc
  ${CMAKE_CURRENT_LIST_DIR}/cache_engine.cc
  ${CMAKE_CURRENT_LIST_DIR}/communicator.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu/cpu_backend.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu/simd.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu/thread_pool.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu_model_runner.cc
  ${CMAKE_CURRENT_LIST_DIR}/llama_model.cc
  ${CMAKE_CURRENT_LIST_DIR}/sampler.cc
  ${CMAKE_CURRENT_LIST_DIR}/sharded_weights.cc
  ${CMAKE_CURRENT_LIST_DIR}/step_batch.cc
  ${CMAKE_CURRENT_LIST_DIR}/step_execution.cc
  ${CMAKE_CURRENT_LIST_DIR}/tensor_parallel_group.cc)
target_link_libraries(pagoda_worker_core PUBLIC
  pagoda_proto pagoda_common pagoda_comm pagoda_kernels_host Threads::Threads
  absl::status absl::statusor absl::strings absl::span absl::flat_hash_set)

foreach(test_name cpu_attention cpu_simd cpu_thread_pool cpu_linear backend batch sampler
        sharded_weights tensor_parallel_group
        model_runner step_batch)
  set(test_source ${CMAKE_CURRENT_LIST_DIR}/${test_name}_test.cc)
  if(test_name MATCHES "^cpu_")
    string(REPLACE "cpu_" "" cpu_test ${test_name})
    set(test_source ${CMAKE_CURRENT_LIST_DIR}/cpu/${cpu_test}_test.cc)
  endif()
  if(EXISTS ${test_source})
    pagoda_add_test(worker_${test_name}_test
      SOURCES ${test_source}
      LIBS pagoda_worker_core GTest::gmock)
  endif()
endforeach()

# The host sampler against the CUDA sampler on the same logits (one rule on
# both devices). Needs the kernels, so only with nvcc; skipped by exit code
# without a GPU (GPU: kernels/testing/gpu_test_main.cc).
if(PAGODA_HAVE_CUDA)
  pagoda_add_test(worker_sampler_device_parity_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/sampler_device_parity_test.cc
            ${CMAKE_SOURCE_DIR}/kernels/ops/testing/cuda_test_util.cc
    LIBS pagoda_worker_core pagoda_kernels_ops
    GPU)
  set_tests_properties(worker_sampler_device_parity_test PROPERTIES TIMEOUT 120)
endif()

# Linear timings on the benchmark model's shapes (not a test).
add_executable(bench_cpu_linear ${CMAKE_CURRENT_LIST_DIR}/cpu/bench_linear.cc)
target_link_libraries(bench_cpu_linear PRIVATE pagoda_worker_core)
add_executable(bench_cpu_decode ${CMAKE_CURRENT_LIST_DIR}/cpu/bench_decode.cc)
target_link_libraries(bench_cpu_decode PRIVATE pagoda_worker_core pagoda_flags absl::strings)
