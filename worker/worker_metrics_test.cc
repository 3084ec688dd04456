// pagoda_worker_refused_calls_total: calls without the right secret, made
// over gRPC to a WorkerService, are what a scrape of the worker's /metrics
// reports.
#include "worker/worker_metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "wire/worker_secret.h"
#include "worker/worker_service.h"

namespace pagoda::worker {
namespace {

namespace v1 = ::pagoda::worker::v1;

constexpr char kSecret[] = "metrics-test-secret-0123456789";

// The body of GET /metrics on 127.0.0.1:`port` (HTTP/1.0: the server closes).
std::string Scrape(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return "";
  }
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
  send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string response;
  char buffer[4096];
  for (ssize_t got; (got = recv(fd, buffer, sizeof(buffer), 0)) > 0;) response.append(buffer, got);
  close(fd);
  return response;
}

TEST(WorkerMetricsTest, RefusedCallsAreCountedPerRank) {
  WorkerService service(
      /*rank=*/2, kSecret,
      [](const std::string&) -> absl::StatusOr<std::unique_ptr<ModelRunner>> {
        return absl::UnavailableError("no runner in this test");
      },
      [] {});
  grpc::ServerBuilder builder;
  int grpc_port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &grpc_port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto metrics = WorkerMetrics::Start("127.0.0.1", 0, /*rank=*/2, [&service] {
    return WorkerCounts{.refused_calls = service.refused_calls()};
  });
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_NE(Scrape((*metrics)->port()).find("pagoda_worker_refused_calls_total{rank=\"2\"} 0"),
            std::string::npos);

  auto stub = v1::Worker::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_port),
                                                      grpc::InsecureChannelCredentials()));
  auto call = [&](const std::string& secret) {
    grpc::ClientContext context;
    if (!secret.empty()) context.AddMetadata(kWorkerSecretMetadataKey, secret);
    v1::InitCacheResponse response;
    return stub->InitCache(&context, v1::InitCacheRequest(), &response).error_code();
  };
  EXPECT_EQ(call(""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call("wrong-secret-0123456789abcdef"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call(""), grpc::StatusCode::UNAUTHENTICATED);
  // The right secret is not refused for it (the call fails for other reasons:
  // no owner id, no model).
  EXPECT_NE(call(kSecret), grpc::StatusCode::UNAUTHENTICATED);

  const std::string scraped = Scrape((*metrics)->port());
  EXPECT_NE(scraped.find("# TYPE pagoda_worker_refused_calls_total counter"), std::string::npos)
      << scraped;
  EXPECT_NE(scraped.find("pagoda_worker_refused_calls_total{rank=\"2\"} 3"), std::string::npos)
      << scraped;
  EXPECT_EQ(service.refused_calls(), 3);
  server->Shutdown();
}

TEST(WorkerMetricsTest, BusyPortIsUnavailable) {
  auto first = WorkerMetrics::Start("127.0.0.1", 0, 0, [] { return WorkerCounts{}; });
  ASSERT_TRUE(first.ok()) << first.status();
  auto second =
      WorkerMetrics::Start("127.0.0.1", (*first)->port(), 0, [] { return WorkerCounts{}; });
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace pagoda::worker
