# The gRPC worker service (library pagoda_worker_service), the pagoda-worker
# executable and the tests that drive real worker processes.
add_library(pagoda_worker_service STATIC
  ${CMAKE_CURRENT_LIST_DIR}/step_cancellation.cc
  ${CMAKE_CURRENT_LIST_DIR}/step_channel_server.cc
  ${CMAKE_CURRENT_LIST_DIR}/worker_service.cc)
target_link_libraries(pagoda_worker_service PUBLIC
  pagoda_proto pagoda_worker_secret pagoda_frame_channel gRPC::grpc++ absl::status absl::statusor absl::strings absl::synchronization
  absl::time glog::glog)

pagoda_add_test(worker_step_cancellation_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/step_cancellation_test.cc
  LIBS pagoda_worker_service absl::strings absl::time)

# The executable needs the model runner, built by worker_core.cmake.
if(TARGET pagoda_worker_core)
  add_executable(pagoda-worker ${CMAKE_CURRENT_LIST_DIR}/worker_main.cc)
  target_link_libraries(pagoda-worker PRIVATE
    pagoda_worker_service pagoda_worker_core pagoda_flags pagoda_tls absl::flags
    absl::flags_parse glog::glog Threads::Threads)

  if(TARGET pagoda_worker_client AND EXISTS ${CMAKE_CURRENT_LIST_DIR}/worker_service_test.cc)
    pagoda_add_test(worker_service_test
      SOURCES ${CMAKE_CURRENT_LIST_DIR}/worker_service_test.cc
      LIBS pagoda_worker_client pagoda_worker_core absl::strings absl::time)
    target_compile_definitions(worker_service_test PRIVATE
      PAGODA_WORKER_BINARY="$<TARGET_FILE:pagoda-worker>")
    add_dependencies(worker_service_test pagoda-worker)
  endif()
else()
  message(STATUS "pagoda-worker not built yet: no pagoda_worker_core target")
endif()
