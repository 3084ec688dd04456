# pagoda-kv-sim (the paper's memory figures over the real block manager and
# scheduler, with a fake worker) and the scheduler's Google Benchmarks.
add_library(pagoda_kv_sim STATIC
  ${CMAKE_CURRENT_LIST_DIR}/sim/trace.cc
  ${CMAKE_CURRENT_LIST_DIR}/sim/pagoda_sim.cc
  ${CMAKE_CURRENT_LIST_DIR}/sim/orca_sim.cc
)
target_link_libraries(pagoda_kv_sim PUBLIC pagoda_scheduler_core absl::flat_hash_set)

add_executable(pagoda-kv-sim ${CMAKE_CURRENT_LIST_DIR}/sim/kv_sim_main.cc)
target_link_libraries(pagoda-kv-sim PRIVATE pagoda_kv_sim pagoda_common absl::flags
  absl::flags_parse absl::flags_usage absl::str_format)

add_executable(bench_scheduler ${CMAKE_CURRENT_LIST_DIR}/sim/scheduler_bench.cc)
target_link_libraries(bench_scheduler PRIVATE pagoda_scheduler_core benchmark::benchmark)

pagoda_add_test(scheduler_kv_sim_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/sim/kv_sim_test.cc
  LIBS pagoda_kv_sim)
