# CUDA cache, layer, sampling and GEMM ops (kernels/ops/). Included from
# kernels/CMakeLists.txt only when nvcc was found; scripts/gpu_check/ includes
# it too, outside the full project, on the GPU machine.
set(PAGODA_OPS_DIR ${CMAKE_CURRENT_LIST_DIR}/ops)

add_library(pagoda_kernels_ops STATIC
  ${PAGODA_OPS_DIR}/block_copy_plan.cc
  ${PAGODA_OPS_DIR}/cache_ops.cu
  ${PAGODA_OPS_DIR}/swap_blocks.cc
  ${PAGODA_OPS_DIR}/rms_norm.cu
  ${PAGODA_OPS_DIR}/rotary_embedding.cu
  ${PAGODA_OPS_DIR}/activation.cu
  ${PAGODA_OPS_DIR}/embedding.cu
  ${PAGODA_OPS_DIR}/sampling.cu
  ${PAGODA_OPS_DIR}/logits_processing.cu
  ${PAGODA_OPS_DIR}/gemm.cc)
# The rotary tables are host C++ shared with the CPU worker (kernels/CMakeLists.txt
# defines the library; scripts/gpu_check/ builds this file alone).
if(NOT TARGET pagoda_kernels_host)
  add_library(pagoda_kernels_host STATIC ${PAGODA_OPS_DIR}/rope_cache.cc)
endif()
target_link_libraries(pagoda_kernels_ops PUBLIC pagoda_kernels_host CUDA::cudart CUDA::cublas CUDA::cublasLt)
set_target_properties(pagoda_kernels_ops PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_compile_options(pagoda_kernels_ops PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo --expt-relaxed-constexpr>)

# Kernel tests need a device (GPU: label "cuda", skipped by exit code without
# one, see cmake/PagodaTest.cmake); the host-only planners run everywhere.
set(PAGODA_OPS_TEST_UTIL ${PAGODA_OPS_DIR}/testing/cuda_test_util.cc)
foreach(pagoda_ops_test cache_ops_test layer_ops_test sampling_test gemm_test)
  pagoda_add_test(kernels_ops_${pagoda_ops_test}
    SOURCES ${PAGODA_OPS_DIR}/${pagoda_ops_test}.cc ${PAGODA_OPS_TEST_UTIL}
    LIBS pagoda_kernels_ops
    GPU)
  set_tests_properties(kernels_ops_${pagoda_ops_test} PROPERTIES TIMEOUT 120)
endforeach()
foreach(pagoda_ops_test rope_cache_test block_copy_plan_test)
  pagoda_add_test(kernels_ops_${pagoda_ops_test}
    SOURCES ${PAGODA_OPS_DIR}/${pagoda_ops_test}.cc ${PAGODA_OPS_TEST_UTIL}
    LIBS pagoda_kernels_ops
    LABELS cuda)
  set_tests_properties(kernels_ops_${pagoda_ops_test} PROPERTIES TIMEOUT 120)
endforeach()

add_executable(bench_cache_ops ${PAGODA_OPS_DIR}/bench_cache_ops.cc)
target_link_libraries(bench_cache_ops PRIVATE pagoda_kernels_ops)
