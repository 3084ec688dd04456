# pagoda_add_test: one gtest binary registered with ctest. Shared by the
# top-level project and the kernels-only project of scripts/gpu_check/.
# Expects PAGODA_REPO_DIR (the repository root) and PAGODA_PYTHON3.
# pagoda_add_test(NAME SOURCES a.cc b.cc LIBS x y [LABELS l] [GPU])
# GPU: the binary needs a CUDA device. It links tests/kernels/gpu_test_main.cc
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
  # The test's own sources at a lower level than the product's: they are
  # gtest and gRPC template code, two thirds of the build's compile time, and
  # the product code they test comes from the libraries, at the product's
  # level. Release: -O1 (scheduler_openai_protocol_test: 21 s of CPU against
  # 34 s at -O3; not -O0, as some tests compute plain references in their own
  # sources). Sanitizer builds (-O1 for everything else): -O0, 24 s against
  # 44 s under ASan+UBSan, which instruments the test code too.
  if(PAGODA_SANITIZE)
    target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-O0>)
  else()
    target_compile_options(${name} PRIVATE
      $<$<AND:$<CONFIG:Release>,$<COMPILE_LANGUAGE:CXX>>:-O1>)
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

# pagoda_lock_directory_tests([SERIAL name ...]): called last in every
# tests/ folder. The test command runs ctest two at a time
# (scripts/test.sh); the tests under tests/ start real processes, time
# failure detection or load the CPU with whole models, so they share the
# lock "tests/": one of them at a time, beside the product folders' unit
# tests. The SERIAL ones time what a loaded machine blurs (a worker's death
# seen within seconds) and run alone. (A function each folder calls: CMake
# 3.25 sets a test's properties only from the folder that added it.)
function(pagoda_lock_directory_tests)
  cmake_parse_arguments(ARG "" "" "SERIAL" ${ARGN})
  get_property(tests DIRECTORY PROPERTY TESTS)
  if(tests)
    set_property(TEST ${tests} APPEND PROPERTY RESOURCE_LOCK tests/)
  endif()
  foreach(name IN LISTS ARG_SERIAL)
    if(name IN_LIST tests)
      set_tests_properties(${name} PROPERTIES RUN_SERIAL TRUE)
    endif()
  endforeach()
endfunction()
