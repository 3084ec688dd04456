# pagoda-cli: a command-line client of pagoda.v1.Generation.
add_executable(pagoda-cli ${CMAKE_CURRENT_LIST_DIR}/pagoda_cli.cc)
target_link_libraries(pagoda-cli PRIVATE pagoda_proto pagoda_flags pagoda_tls gRPC::grpc++ absl::flags absl::flags_parse
  absl::flags_usage absl::strings)
