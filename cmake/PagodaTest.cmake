# pagoda_add_test: one gtest binary registered with ctest. Shared by the
# top-level project and the kernels-only project of scripts/gpu_check/.
# Expects PAGODA_REPO_DIR (the repository root) and PAGODA_PYTHON3.
# pagoda_add_test(NAME SOURCES a.cc b.cc LIBS x y [LABELS l])
function(pagoda_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main Threads::Threads)
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${PAGODA_REPO_DIR})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT
    "PAGODA_SOURCE_DIR=${PAGODA_REPO_DIR};PAGODA_BINARY_DIR=${CMAKE_BINARY_DIR};PAGODA_PYTHON3=${PAGODA_PYTHON3}")
  if(ARG_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}")
  endif()
endfunction()
