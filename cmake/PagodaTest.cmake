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

# The test binaries' optimization level (see pagoda_add_test below), shared
# with pagoda_test_pch, whose precompiled header GCC and clang use only when
# the flags match. -pthread too: most tests get it from gRPC's and Abseil's
# usage requirements (the same option once, de-duplicated), the few that
# link neither would otherwise not match the header (_REENTRANT).
function(pagoda_test_compile_options target)
  if(PAGODA_SANITIZE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-O0>)
  else()
    target_compile_options(${target} PRIVATE
      $<$<AND:$<CONFIG:Release>,$<COMPILE_LANGUAGE:CXX>>:-O1>)
  endif()
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-pthread>)
  # Tests build options and requests as aggregates that name only the fields
  # a case is about, the rest at their defaults, on purpose.
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wno-missing-field-initializers>)
endfunction()

# pagoda_test_pch: one precompiled header of the third-party headers most
# test sources include (the standard library, gtest, Abseil, JSON, gRPC),
# which every pagoda_add_test binary reuses. Parsing them was about a third
# of a test source's compile time, paid again by each of ~140 test binaries;
# the shared header saves about half of that (six test sources, by the
# build's own commands: 52.0 s of CPU without it, 43.6 s with). Only where
# every package is found
# (not in scripts/gpu_check's kernels-only project); PAGODA_TEST_PCH=OFF
# turns it off.
option(PAGODA_TEST_PCH "Test binaries share one precompiled header" ON)
if(PAGODA_TEST_PCH AND TARGET GTest::gtest AND TARGET gRPC::grpc++ AND TARGET absl::strings
   AND TARGET nlohmann_json::nlohmann_json)
  add_library(pagoda_test_pch OBJECT ${CMAKE_CURRENT_LIST_DIR}/test_pch.cc)
  target_link_libraries(pagoda_test_pch PRIVATE GTest::gtest gRPC::grpc++ absl::status
                        absl::statusor absl::strings absl::time nlohmann_json::nlohmann_json
                        Threads::Threads)
  pagoda_test_compile_options(pagoda_test_pch)
  set_target_properties(pagoda_test_pch PROPERTIES UNITY_BUILD OFF)
  target_precompile_headers(pagoda_test_pch PRIVATE
    <algorithm> <atomic> <cmath> <cstdint> <cstdlib> <filesystem> <fstream> <functional>
    <map> <memory> <random> <string> <thread> <vector>
    [["gtest/gtest.h"]] [["absl/status/status.h"]] [["absl/status/statusor.h"]]
    [["absl/strings/str_cat.h"]] [["absl/strings/match.h"]] [["absl/time/time.h"]]
    [["absl/time/clock.h"]] [["nlohmann/json.hpp"]] [["grpcpp/grpcpp.h"]])
endif()
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
  pagoda_test_compile_options(${name})
  if(TARGET pagoda_test_pch)
    target_precompile_headers(${name} REUSE_FROM pagoda_test_pch)
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

# pagoda_serial_tests(name ...): the tests, in the calling folder, that time
# what a loaded machine blurs (a worker's death seen within seconds): each
# runs alone. The test command runs ctest two at a time (scripts/test.sh),
# and every other test may run beside another, the tests under tests/
# (real server and worker processes, whole models) included: they wait for
# conditions with deadlines. Until 2026-12-06 those shared one lock; of four
# trial runs without it, the first two each found a test with a race of its
# own (deploy_queue_limit_test, integration_speculative_test, both fixed),
# and the last two took 248 s and 250 s against 386 s with the lock, on an
# idle 2-core machine.
# (A function each folder calls: CMake 3.25 sets a test's properties only
# from the folder that added it.)
function(pagoda_serial_tests)
  set_tests_properties(${ARGN} PROPERTIES RUN_SERIAL TRUE)
endfunction()
