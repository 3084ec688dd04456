# The CUDA worker. cuda_support (head sizes, serving dtype, KV sizing) and the
# graph-batch shaping are plain host code, built and tested everywhere. The
# backend, graph runner and model runner need nvcc: without it they are
# absent and pagoda-worker refuses --device cuda (runner_factory.cc, tested).
set(PAGODA_WORKER_CUDA_DIR ${CMAKE_CURRENT_LIST_DIR})

add_library(pagoda_worker_cuda_support STATIC
  ${PAGODA_WORKER_CUDA_DIR}/cuda_support.cc
  ${PAGODA_WORKER_CUDA_DIR}/graph_batch.cc)
target_link_libraries(pagoda_worker_cuda_support PUBLIC
  pagoda_proto pagoda_common absl::status absl::statusor absl::strings)
foreach(test_name cuda_support graph_batch)
  pagoda_add_test(worker_${test_name}_test
    SOURCES ${PAGODA_WORKER_CUDA_DIR}/${test_name}_test.cc
    LIBS pagoda_worker_cuda_support GTest::gmock)
endforeach()

if(PAGODA_HAVE_CUDA AND TARGET pagoda_worker_core)
  add_library(pagoda_worker_cuda STATIC
    ${PAGODA_WORKER_CUDA_DIR}/cuda_backend.cc
    ${PAGODA_WORKER_CUDA_DIR}/cuda_backend_kernels.cu
    ${PAGODA_WORKER_CUDA_DIR}/cuda_graph_runner.cc
    ${PAGODA_WORKER_CUDA_DIR}/cuda_model_runner.cc)
  target_link_libraries(pagoda_worker_cuda PUBLIC
    pagoda_worker_core pagoda_worker_cuda_support pagoda_kernels_ops pagoda_kernels_attention
    CUDA::cudart glog::glog)
  target_compile_options(pagoda_worker_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo>)
  # Tensor parallelism on CUDA goes over NCCL (worker/comm, added before
  # worker/); without it the CUDA runner serves one rank only.
  if(TARGET pagoda_comm_nccl)
    target_sources(pagoda_worker_cuda PRIVATE ${PAGODA_WORKER_CUDA_DIR}/nccl_transport.cc)
    target_link_libraries(pagoda_worker_cuda PUBLIC pagoda_comm_nccl)
    target_compile_definitions(pagoda_worker_cuda PRIVATE PAGODA_WORKER_HAS_NCCL=1)
  else()
    target_compile_definitions(pagoda_worker_cuda PRIVATE PAGODA_WORKER_HAS_NCCL=0)
  endif()
  include(${PAGODA_WORKER_CUDA_DIR}/cuda_tests.cmake OPTIONAL)
endif()
# pagoda-worker's runner by --device: with the CUDA runner only under nvcc.
if(TARGET pagoda_worker_core)
  add_library(pagoda_worker_runner_factory STATIC ${PAGODA_WORKER_CUDA_DIR}/runner_factory.cc)
  target_link_libraries(pagoda_worker_runner_factory PUBLIC pagoda_worker_core absl::statusor)
  if(TARGET pagoda_worker_cuda)
    target_link_libraries(pagoda_worker_runner_factory PUBLIC pagoda_worker_cuda)
    target_compile_definitions(pagoda_worker_runner_factory PRIVATE PAGODA_WORKER_HAS_CUDA=1)
  else()
    target_compile_definitions(pagoda_worker_runner_factory PRIVATE PAGODA_WORKER_HAS_CUDA=0)
  endif()
  pagoda_add_test(worker_runner_factory_test
    SOURCES ${PAGODA_WORKER_CUDA_DIR}/runner_factory_test.cc
    LIBS pagoda_worker_runner_factory GTest::gmock)
  if(TARGET pagoda-worker)
    target_link_libraries(pagoda-worker PRIVATE pagoda_worker_runner_factory)
  endif()
endif()
