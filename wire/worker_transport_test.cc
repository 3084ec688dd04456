#include "wire/worker_transport.h"

#include "gtest/gtest.h"

namespace pagoda::wire {
namespace {

TEST(WorkerTransportTest, UnixSocketsAreUnixSockets) {
  EXPECT_EQ(WorkerTransportOf("unix:/tmp/pagoda/worker.sock"), WorkerTransport::kUnixSocket);
}

TEST(WorkerTransportTest, LoopbackHostsAreLoopback) {
  for (const char* address :
       {"127.0.0.1:0", "127.0.0.1:50051", "[::1]:50051", "localhost:50051", "LocalHost:1"}) {
    EXPECT_EQ(WorkerTransportOf(address), WorkerTransport::kLoopbackTcp) << address;
  }
}

// The rest of 127.0.0.0/8 too: gRPC's local credentials refuse it.
TEST(WorkerTransportTest, EveryOtherHostIsNetwork) {
  for (const char* address :
       {"127.0.0.2:1", "127.1.2.3:7", "127.255.255.255:1", "0.0.0.0:50051", "[::]:50051",
        "10.0.0.7:50051", "128.0.0.1:1", "[::2]:1", "[::ffff:127.0.0.1]:1",
        "worker-0.pagoda.svc.cluster.local:50051", "localhost.example.com:1", "127.0.0.1",
        "ipv4:127.0.0.1:1", "::1", "", ":50051", "127.0.0.1.evil:1"}) {
    EXPECT_EQ(WorkerTransportOf(address), WorkerTransport::kNetworkTcp) << address;
  }
}

}  // namespace
}  // namespace pagoda::wire
