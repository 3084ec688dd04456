# pagoda-server: engine loop, gRPC frontend, validation, streaming, metrics
# (library pagoda_server_lib), the pagoda-server executable, pagoda-bench and
# their tests.
add_library(pagoda_server_lib STATIC
  ${CMAKE_CURRENT_LIST_DIR}/engine/engine.cc
  ${CMAKE_CURRENT_LIST_DIR}/engine/recovery.cc
  ${CMAKE_CURRENT_LIST_DIR}/api/frontend.cc
  ${CMAKE_CURRENT_LIST_DIR}/metrics.cc
  ${CMAKE_CURRENT_LIST_DIR}/api/request_detokenizer.cc
  ${CMAKE_CURRENT_LIST_DIR}/api/request_output.cc
  ${CMAKE_CURRENT_LIST_DIR}/api/request_reactors.cc
  ${CMAKE_CURRENT_LIST_DIR}/api/request_validation.cc
  ${CMAKE_CURRENT_LIST_DIR}/api/validation_pool.cc
  ${CMAKE_CURRENT_LIST_DIR}/api/stop_strings.cc
  ${CMAKE_CURRENT_LIST_DIR}/api/http_connection.cc
  ${CMAKE_CURRENT_LIST_DIR}/api/http_request_stream.cc
  ${CMAKE_CURRENT_LIST_DIR}/api/http_server.cc
  ${CMAKE_CURRENT_LIST_DIR}/api/openai_protocol.cc
)
target_link_libraries(pagoda_server_lib PUBLIC
  pagoda_scheduler_core pagoda_worker_client pagoda_common pagoda_text pagoda_proto
  gRPC::grpc++ gRPC::grpc++_reflection prometheus-cpp::core prometheus-cpp::pull
  absl::status absl::statusor absl::strings absl::str_format absl::synchronization absl::time
  absl::flat_hash_map absl::flat_hash_set glog::glog Threads::Threads PkgConfig::HTTPLIB)

add_executable(pagoda-server ${CMAKE_CURRENT_LIST_DIR}/server_main.cc)
target_link_libraries(pagoda-server PRIVATE pagoda_server_lib absl::flags absl::flags_parse
  absl::flags_usage)

add_executable(pagoda-bench ${CMAKE_CURRENT_LIST_DIR}/bench_main.cc)
target_link_libraries(pagoda-bench PRIVATE pagoda_proto pagoda_common pagoda_kv_sim gRPC::grpc++ absl::flags
  absl::flags_parse absl::strings absl::str_format absl::time absl::synchronization)

pagoda_add_test(scheduler_request_validation_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/api/request_validation_test.cc
  LIBS pagoda_server_lib pagoda_test_support)
pagoda_add_test(scheduler_validation_pool_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/api/validation_pool_test.cc
  LIBS pagoda_server_lib)
pagoda_add_test(scheduler_request_output_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/api/request_output_test.cc
  LIBS pagoda_server_lib pagoda_test_support)
pagoda_add_test(scheduler_request_detokenizer_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/api/request_detokenizer_test.cc
  LIBS pagoda_server_lib pagoda_test_support)
pagoda_add_test(scheduler_http_connection_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/api/http_connection_test.cc
  LIBS pagoda_server_lib)
pagoda_add_test(scheduler_stop_strings_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/api/stop_strings_test.cc
  LIBS pagoda_server_lib)
pagoda_add_test(scheduler_openai_protocol_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/api/openai_protocol_test.cc
  LIBS pagoda_server_lib)
