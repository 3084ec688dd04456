#include "scheduler/api/grpc_request_metrics.h"

#include "gtest/gtest.h"

namespace pagoda::scheduler {
namespace {

TEST(GrpcCodeNameTest, NamesEveryCodeAsGrpcSpellsIt) {
  EXPECT_EQ(GrpcCodeName(grpc::StatusCode::OK), "OK");
  EXPECT_EQ(GrpcCodeName(grpc::StatusCode::CANCELLED), "CANCELLED");
  EXPECT_EQ(GrpcCodeName(grpc::StatusCode::INVALID_ARGUMENT), "INVALID_ARGUMENT");
  EXPECT_EQ(GrpcCodeName(grpc::StatusCode::RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
  EXPECT_EQ(GrpcCodeName(grpc::StatusCode::UNIMPLEMENTED), "UNIMPLEMENTED");
  EXPECT_EQ(GrpcCodeName(grpc::StatusCode::UNAVAILABLE), "UNAVAILABLE");
  EXPECT_EQ(GrpcCodeName(grpc::StatusCode::UNAUTHENTICATED), "UNAUTHENTICATED");
}

TEST(GrpcCodeNameTest, CodesOutsideGrpcsSeventeenAreUnknown) {
  EXPECT_EQ(GrpcCodeName(static_cast<grpc::StatusCode>(17)), "UNKNOWN");
  EXPECT_EQ(GrpcCodeName(static_cast<grpc::StatusCode>(-1)), "UNKNOWN");
  EXPECT_EQ(GrpcCodeName(grpc::StatusCode::DO_NOT_USE), "UNKNOWN");
}

}  // namespace
}  // namespace pagoda::scheduler
