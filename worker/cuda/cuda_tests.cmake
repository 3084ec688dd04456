# GPU tests of the CUDA worker (included by cuda.cmake when nvcc was found):
# GPU-vs-CPU logits, backend ops, graphs-vs-eager. Both skip by exit code without a
# device (pagoda_add_test GPU).
pagoda_add_test(worker_cuda_model_test
  SOURCES ${PAGODA_WORKER_CUDA_DIR}/cuda_model_test.cc
  LIBS pagoda_worker_cuda
  GPU)
pagoda_add_test(worker_cuda_backend_test
  SOURCES ${PAGODA_WORKER_CUDA_DIR}/cuda_backend_test.cc
  LIBS pagoda_worker_cuda
  GPU)
pagoda_add_test(worker_cuda_graph_test
  SOURCES ${PAGODA_WORKER_CUDA_DIR}/cuda_graph_test.cc
  LIBS pagoda_worker_cuda
  GPU)
set_tests_properties(worker_cuda_model_test worker_cuda_backend_test worker_cuda_graph_test
  PROPERTIES TIMEOUT 240)

# Decode step time of a whole model vs its bandwidth floor (scripts/gpu_check.sh).
add_executable(bench_decode_step ${PAGODA_WORKER_CUDA_DIR}/bench_decode_step.cc)
target_link_libraries(bench_decode_step PRIVATE pagoda_worker_cuda pagoda_flags absl::strings)

# Load-time refusals of the CUDA runner: host-side, run on every nvcc build.
# Labelled cuda as well, so gpu_check.sh runs it where its device branch (a
# group join that must fail, not hang) is taken.
pagoda_add_test(worker_cuda_model_runner_test
  SOURCES ${PAGODA_WORKER_CUDA_DIR}/cuda_model_runner_test.cc
  LIBS pagoda_worker_cuda GTest::gmock
  LABELS cuda)

# The model's all-reduces over NCCL: size 1 on any GPU, two ranks on two.
if(TARGET pagoda_comm_nccl)
  pagoda_add_test(worker_cuda_tensor_parallel_test
    SOURCES ${PAGODA_WORKER_CUDA_DIR}/cuda_tensor_parallel_test.cc
    LIBS pagoda_worker_cuda
    GPU)
  set_tests_properties(worker_cuda_tensor_parallel_test PROPERTIES TIMEOUT 240)
endif()
