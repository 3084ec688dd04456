# Scheduler core: block allocator, block manager, sequences, scheduler policy,
# output processing and step-plan building. No gRPC server code, no CUDA.
add_library(pagoda_scheduler_core STATIC
  ${CMAKE_CURRENT_LIST_DIR}/kv/block_pool.cc
  ${CMAKE_CURRENT_LIST_DIR}/kv/block_manager.cc
  ${CMAKE_CURRENT_LIST_DIR}/engine/sequence.cc
  ${CMAKE_CURRENT_LIST_DIR}/engine/scheduler.cc
  ${CMAKE_CURRENT_LIST_DIR}/engine/scheduler_recovery.cc
  ${CMAKE_CURRENT_LIST_DIR}/engine/output_processor.cc
  ${CMAKE_CURRENT_LIST_DIR}/engine/beam_search.cc
  ${CMAKE_CURRENT_LIST_DIR}/engine/step_plan.cc
)
target_link_libraries(pagoda_scheduler_core PUBLIC
  pagoda_proto absl::status absl::statusor absl::strings absl::time
  absl::flat_hash_map absl::flat_hash_set glog::glog)

pagoda_add_test(scheduler_block_manager_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/kv/block_manager_test.cc
  LIBS pagoda_scheduler_core)

pagoda_add_test(scheduler_scheduler_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine/scheduler_test.cc
  LIBS pagoda_scheduler_core)

pagoda_add_test(scheduler_engine_sim_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine/engine_sim_test.cc
  LIBS pagoda_scheduler_core)

pagoda_add_test(scheduler_beam_search_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine/beam_search_test.cc
  LIBS pagoda_scheduler_core)
