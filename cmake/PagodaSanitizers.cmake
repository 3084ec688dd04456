# Sanitizer and fuzzer builds. scripts/sanitizer_tests.sh configures them in
# folders of their own (build-asan, build-tsan) with Debian's clang and builds
# only the targets it runs; the default build sets neither option.
#
#   PAGODA_SANITIZE  a -fsanitize= list for every target: "address,undefined"
#                    or "thread". Any report stops the process (no recovery),
#                    so a test with one fails.
#   PAGODA_FUZZERS   ON: tests/fuzz builds libFuzzer targets (clang only) and
#                    every object gets libFuzzer's coverage instrumentation.
#                    OFF: the same targets link a main that replays their
#                    corpus and regression inputs as an ordinary test.
set(PAGODA_SANITIZE "" CACHE STRING
    "-fsanitize= list for every target (address,undefined or thread); empty for none")
option(PAGODA_FUZZERS "Build tests/fuzz as libFuzzer targets (clang)" OFF)

if(PAGODA_FUZZERS AND NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "PAGODA_FUZZERS needs clang (libFuzzer); the C++ compiler is "
                      "${CMAKE_CXX_COMPILER_ID}. Configure with -DCMAKE_CXX_COMPILER=clang++-14.")
endif()
if(PAGODA_SANITIZE AND PAGODA_HAVE_CUDA)
  message(FATAL_ERROR "PAGODA_SANITIZE builds are host-only: add -DPAGODA_ENABLE_CUDA=OFF")
endif()

if(PAGODA_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${PAGODA_SANITIZE}>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=all>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=${PAGODA_SANITIZE})
endif()
if(PAGODA_FUZZERS)
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link>)
endif()
message(STATUS "Pagoda sanitizers: '${PAGODA_SANITIZE}', fuzzers: ${PAGODA_FUZZERS}")

# Under TSan, every executable links tests/sanitizers/tsan_absl_sync.cc, which
# makes Debian's (uninstrumented) Abseil locking visible to TSan; without it
# every absl::Mutex-guarded access would be reported. Called once every
# target exists (end of the top-level CMakeLists.txt).
function(pagoda_finish_sanitizer_build)
  if(NOT PAGODA_SANITIZE MATCHES "thread")
    return()
  endif()
  add_library(pagoda_tsan_absl_sync OBJECT ${CMAKE_SOURCE_DIR}/tests/sanitizers/tsan_absl_sync.cc)
  target_link_libraries(pagoda_tsan_absl_sync PUBLIC absl::synchronization ${CMAKE_DL_LIBS})
  set(pending ${CMAKE_SOURCE_DIR})
  while(pending)
    list(POP_FRONT pending dir)
    get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
    list(APPEND pending ${subdirs})
    get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
    foreach(target IN LISTS targets)
      get_target_property(type ${target} TYPE)
      if(type STREQUAL "EXECUTABLE")
        target_link_libraries(${target} PRIVATE pagoda_tsan_absl_sync)
        # Shared libraries (gRPC's) must reach these definitions too.
        target_link_options(${target} PRIVATE "LINKER:--export-dynamic-symbol=_ZN*4absl7debian3*")
      endif()
    endforeach()
  endwhile()
endfunction()
