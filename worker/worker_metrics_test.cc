// pagoda_worker_refused_calls_total: calls without the right secret, made
// over gRPC to a WorkerService, are what a scrape of the worker's /metrics
// reports; pagoda_worker_idle_between_steps_seconds: the gaps between steps,
// as a histogram.
#include "worker/worker_metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "wire/worker_secret.h"
#include "worker/worker_service.h"

namespace pagoda::worker {
namespace {

namespace v1 = ::pagoda::worker::v1;

constexpr char kSecret[] = "metrics-test-secret-0123456789";

// Connects to 127.0.0.1:`port`; -1 when refused.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends `request` and reads the answer to the server's close.
std::string Exchange(int port, const std::string& request) {
  const int fd = Connect(port);
  if (fd < 0) return "";
  send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string response;
  char buffer[4096];
  for (ssize_t got; (got = recv(fd, buffer, sizeof(buffer), 0)) > 0;) response.append(buffer, got);
  close(fd);
  return response;
}

// The answer to GET /metrics on 127.0.0.1:`port` (the server closes).
std::string Scrape(int port) {
  return Exchange(port, "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n");
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

TEST(WorkerMetricsTest, BusyPortIsUnavailableAndSaysInUse) {
  auto first = WorkerMetrics::Start("127.0.0.1", 0, 0, [] { return WorkerCounts{}; });
  ASSERT_TRUE(first.ok()) << first.status();
  auto second =
      WorkerMetrics::Start("127.0.0.1", (*first)->port(), 0, [] { return WorkerCounts{}; });
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(
      second.status().message(),
      absl::StrCat("metrics: cannot listen on 127.0.0.1:", (*first)->port(), ": port in use"));
}

TEST(WorkerMetricsTest, NotAnAddressIsUnavailable) {
  auto metrics = WorkerMetrics::Start("256.0.0.1", 0, 0, [] { return WorkerCounts{}; });
  EXPECT_EQ(metrics.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(
      absl::StartsWith(metrics.status().message(), "metrics: cannot listen on 256.0.0.1:0: "))
      << metrics.status();
}

// The page server answers hostile and odd requests briefly and keeps
// serving: a wrong path, a wrong method, an oversized head, a silent client.
TEST(WorkerMetricsTest, OddRequestsGetShortAnswersAndScrapesGoOn) {
  auto metrics = WorkerMetrics::Start("127.0.0.1", 0, 4, [] { return WorkerCounts{}; });
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  const int port = (*metrics)->port();
  EXPECT_TRUE(absl::StartsWith(Exchange(port, "GET / HTTP/1.1\r\n\r\n"), "HTTP/1.1 404"));
  EXPECT_TRUE(absl::StartsWith(Exchange(port, "POST /metrics HTTP/1.1\r\n\r\n"), "HTTP/1.1 405"));
  const std::string head_only = Exchange(port, "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(head_only, "HTTP/1.1 200")) << head_only;
  EXPECT_TRUE(absl::EndsWith(head_only, "\r\n\r\n")) << head_only;  // No body.
  const std::string huge =
      absl::StrCat("GET /metrics?", std::string(64 << 10, 'x'), " HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(Exchange(port, huge), "HTTP/1.1 431"));
  // A client that connects and says nothing is dropped at its deadline;
  // the scrape behind it is answered.
  const int silent = Connect(port);
  ASSERT_GE(silent, 0);
  const std::string scraped = Exchange(port, "GET /metrics?x=1 HTTP/1.1\r\n\r\n");
  close(silent);
  EXPECT_TRUE(absl::StartsWith(scraped, "HTTP/1.1 200")) << scraped;
  EXPECT_NE(scraped.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(scraped.find("pagoda_worker_refused_calls_total{rank=\"4\"} 0"), std::string::npos)
      << scraped;
}

// Stopping frees the port at once: a restarted worker binds it again.
TEST(WorkerMetricsTest, PortIsFreeOnceStopped) {
  auto first = WorkerMetrics::Start("127.0.0.1", 0, 0, [] { return WorkerCounts{}; });
  ASSERT_TRUE(first.ok()) << first.status();
  const int port = (*first)->port();
  ASSERT_FALSE(Scrape(port).empty());
  first->reset();
  auto again = WorkerMetrics::Start("127.0.0.1", port, 0, [] { return WorkerCounts{}; });
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(Scrape(port).find("pagoda_worker_refused_calls_total"), std::string::npos);
}

// The gap runs from a step's end to the next step's start; a start without
// an end before it (the first step, or two starts) observes nothing.
TEST(StepIdleHistogramTest, ObservesTheGapsBetweenSteps) {
  StepIdleHistogram idle;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  idle.StepStarted(t0);
  idle.StepEnded(t0 + absl::Milliseconds(30));
  idle.StepStarted(t0 + absl::Milliseconds(32));  // 2 ms idle.
  idle.StepEnded(t0 + absl::Milliseconds(60));
  idle.StepStarted(t0 + absl::Microseconds(60040));  // 40 µs idle.
  idle.StepStarted(t0 + absl::Seconds(5));           // No end between: nothing.
  idle.StepEnded(t0 + absl::Seconds(6));
  idle.StepStarted(t0 + absl::Seconds(8));  // 2 s: past every bound.
  const StepIdleHistogram::Snapshot read = idle.Read();
  EXPECT_EQ(read.count, 3u);
  EXPECT_NEAR(read.sum_seconds, 2.00204, 1e-9);
  // Bounds 50 µs, 100 µs, 250 µs, 500 µs, 1 ms, 2.5 ms, ... 1 s.
  EXPECT_EQ(read.cumulative[0], 1u);
  EXPECT_EQ(read.cumulative[4], 1u);
  EXPECT_EQ(read.cumulative[5], 2u);
  EXPECT_EQ(read.cumulative.back(), 2u);
}

TEST(WorkerMetricsTest, IdleBetweenStepsIsAHistogramPerRank) {
  StepIdleHistogram idle;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  idle.StepEnded(t0);
  idle.StepStarted(t0 + absl::Microseconds(2000));
  auto metrics = WorkerMetrics::Start("127.0.0.1", 0, /*rank=*/1, [&idle] {
    return WorkerCounts{.idle_between_steps = idle.Read()};
  });
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  const std::string scraped = Scrape((*metrics)->port());
  for (const char* line :
       {"# TYPE pagoda_worker_idle_between_steps_seconds histogram",
        "pagoda_worker_idle_between_steps_seconds_bucket{rank=\"1\",le=\"0.001\"} 0",
        "pagoda_worker_idle_between_steps_seconds_bucket{rank=\"1\",le=\"0.0025\"} 1",
        "pagoda_worker_idle_between_steps_seconds_bucket{rank=\"1\",le=\"+Inf\"} 1",
        "pagoda_worker_idle_between_steps_seconds_count{rank=\"1\"} 1",
        "pagoda_worker_idle_between_steps_seconds_sum{rank=\"1\"} 0.002"}) {
    EXPECT_NE(scraped.find(line), std::string::npos) << line << "\n" << scraped;
  }
}

}  // namespace
}  // namespace pagoda::worker
