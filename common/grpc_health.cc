#include "common/grpc_health.h"

#include <future>
#include <utility>

#include "google/protobuf/empty.pb.h"
#include "google/protobuf/wrappers.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/impl/codegen/proto_utils.h"

namespace pagoda {

grpc::Status CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                         grpc::ClientContext& context, int* serving_status) {
  grpc::TemplatedGenericStub<google::protobuf::Empty, google::protobuf::Int32Value> stub(channel);
  google::protobuf::Empty request;
  google::protobuf::Int32Value response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                 &response, [&done](grpc::Status status) { done.set_value(std::move(status)); });
  grpc::Status status = done.get_future().get();
  if (status.ok()) *serving_status = response.value();
  return status;
}

const char* HealthStatusName(int serving_status) {
  static constexpr const char* kNames[] = {"UNKNOWN", "SERVING", "NOT_SERVING",
                                           "SERVICE_UNKNOWN"};
  return serving_status >= 0 && serving_status < 4 ? kNames[serving_status] : "UNRECOGNIZED";
}

}  // namespace pagoda
