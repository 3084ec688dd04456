# The server's side of talking to workers: the gRPC WorkerGroup and the
# launcher of local pagoda-worker processes (library pagoda_worker_client).
add_library(pagoda_worker_client STATIC
  ${CMAKE_CURRENT_LIST_DIR}/workers/grpc_worker_group.cc
  ${CMAKE_CURRENT_LIST_DIR}/workers/worker_group.cc
  ${CMAKE_CURRENT_LIST_DIR}/workers/worker_launcher.cc)
target_link_libraries(pagoda_worker_client PUBLIC
  pagoda_proto pagoda_wire pagoda_common gRPC::grpc++ absl::status absl::statusor absl::strings absl::synchronization
  absl::time absl::flat_hash_set glog::glog Threads::Threads)
