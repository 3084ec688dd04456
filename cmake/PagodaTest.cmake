# pagoda_add_test: one gtest binary registered with ctest. Shared by the
# top-level project and the kernels-only project of scripts/gpu_check/.
# Expects PAGODA_REPO_DIR (the repository root) and PAGODA_PYTHON3.
# pagoda_add_test(NAME SOURCES a.cc b.cc LIBS x y [LABELS l] [GPU])
# GPU: the binary needs a CUDA device. It links kernels/testing/gpu_test_main.cc
# (target pagoda_gpu_test_main, defined only when nvcc was found) instead of
# gtest_main, which exits with PAGODA_GPU_TEST_SKIP_CODE before any test runs
# when no device is present; ctest reports that exit code, and only that one,
# as Skipped. Such tests also get the label "cuda".
set(PAGODA_GPU_TEST_SKIP_CODE 77)  # = kGpuTestSkipExitCode (gpu_test_main.h)
function(pagoda_add_test name)
  cmake_parse_arguments(ARG "GPU" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  set(labels ${ARG_LABELS})
  if(ARG_GPU)
    target_link_libraries(${name} PRIVATE ${ARG_LIBS} pagoda_gpu_test_main GTest::gtest
                                          Threads::Threads)
    list(APPEND labels cuda)
    list(REMOVE_DUPLICATES labels)
  else()
    target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main
                                          Threads::Threads)
  endif()
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${PAGODA_REPO_DIR})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT
    "PAGODA_SOURCE_DIR=${PAGODA_REPO_DIR};PAGODA_BINARY_DIR=${CMAKE_BINARY_DIR};PAGODA_PYTHON3=${PAGODA_PYTHON3}")
  if(ARG_GPU)
    set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE ${PAGODA_GPU_TEST_SKIP_CODE})
  endif()
  if(labels)
    set_tests_properties(${name} PROPERTIES LABELS "${labels}")
  endif()
endfunction()
