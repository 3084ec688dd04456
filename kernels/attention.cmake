# Paged attention kernels (decode + prefill), their tests and benchmark.
# Included from kernels/CMakeLists.txt only when nvcc was found;
# scripts/gpu_check/ includes it too, outside the full project, on the GPU
# machine. Needs only the CUDA toolkit (and GoogleTest for the tests).
set(PAGODA_ATTENTION_DIR ${CMAKE_CURRENT_LIST_DIR}/attention)

add_library(pagoda_kernels_attention STATIC
  ${PAGODA_ATTENTION_DIR}/attention_plan.cc
  ${PAGODA_ATTENTION_DIR}/attention_launch.cu
  ${PAGODA_ATTENTION_DIR}/decode_attention_bf16.cu
  ${PAGODA_ATTENTION_DIR}/decode_attention_f16.cu
  ${PAGODA_ATTENTION_DIR}/prefill_attention_bf16.cu
  ${PAGODA_ATTENTION_DIR}/prefill_attention_f16.cu)
target_link_libraries(pagoda_kernels_attention PUBLIC CUDA::cudart)
set_target_properties(pagoda_kernels_attention PROPERTIES POSITION_INDEPENDENT_CODE ON)
# Spills in these kernels are a performance bug: make ptxas say so.
target_compile_options(pagoda_kernels_attention PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo -Xptxas=-warn-spills>)

# Tests carry the label "cuda" (scripts/gpu_check.sh runs ctest -L cuda).
# attention_plan_test and attention_reference_test are plain host code and run
# everywhere; the kernel tests need a device and are skipped by exit code
# without one (GPU, see cmake/PagodaTest.cmake).
add_library(pagoda_attention_reference STATIC
  ${PAGODA_ATTENTION_DIR}/attention_reference.cc
  ${PAGODA_ATTENTION_DIR}/attention_test_util.cc)
target_link_libraries(pagoda_attention_reference PUBLIC pagoda_kernels_attention CUDA::cudart)

pagoda_add_test(attention_plan_test
  SOURCES ${PAGODA_ATTENTION_DIR}/attention_plan_test.cc
  LIBS pagoda_kernels_attention
  LABELS cuda)
pagoda_add_test(attention_reference_test
  SOURCES ${PAGODA_ATTENTION_DIR}/attention_reference_test.cc
  LIBS pagoda_attention_reference
  LABELS cuda)
foreach(test_name decode_attention_test prefill_attention_test)
  pagoda_add_test(${test_name}
    SOURCES ${PAGODA_ATTENTION_DIR}/${test_name}.cc
    LIBS pagoda_attention_reference
    GPU)
endforeach()
foreach(test_name attention_plan_test attention_reference_test decode_attention_test
                  prefill_attention_test)
  set_tests_properties(${test_name} PROPERTIES TIMEOUT 240)
endforeach()

add_executable(bench_paged_attention ${PAGODA_ATTENTION_DIR}/bench_paged_attention.cu)
target_link_libraries(bench_paged_attention PRIVATE pagoda_kernels_attention)
