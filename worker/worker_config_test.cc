#include "worker/worker_config.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace pagoda::worker {
namespace {

WorkerConfig WithSecret() {
  WorkerConfig config;
  config.secret_file = "/run/secret";
  return config;
}

TEST(WorkerConfigTest, HostsDefaultToTheListenHost) {
  WorkerConfig config = WithSecret();
  config.listen = "10.0.0.5:7000";
  ASSERT_TRUE(CheckAndResolveWorkerConfig(&config).ok());
  EXPECT_EQ(config.collective_host, "10.0.0.5");
  EXPECT_EQ(config.metrics_host, "10.0.0.5");
}

TEST(WorkerConfigTest, UnixSocketsAndWildcardsCollectOnLoopback) {
  WorkerConfig unix_socket = WithSecret();
  unix_socket.listen = "unix:/tmp/w/worker.sock";
  ASSERT_TRUE(CheckAndResolveWorkerConfig(&unix_socket).ok());
  EXPECT_EQ(unix_socket.collective_host, "127.0.0.1");
  EXPECT_EQ(unix_socket.metrics_host, "127.0.0.1");
  // Peers cannot dial 0.0.0.0; a scrape may still reach every interface.
  WorkerConfig wildcard = WithSecret();
  wildcard.listen = "0.0.0.0:7000";
  ASSERT_TRUE(CheckAndResolveWorkerConfig(&wildcard).ok());
  EXPECT_EQ(wildcard.collective_host, "127.0.0.1");
  EXPECT_EQ(wildcard.metrics_host, "0.0.0.0");
}

TEST(WorkerConfigTest, GivenHostsAreKept) {
  WorkerConfig config = WithSecret();
  config.collective_host = "10.1.2.3";
  config.metrics_host = "0.0.0.0";
  ASSERT_TRUE(CheckAndResolveWorkerConfig(&config).ok());
  EXPECT_EQ(config.collective_host, "10.1.2.3");
  EXPECT_EQ(config.metrics_host, "0.0.0.0");
}

TEST(WorkerConfigTest, RefusesWhatCannotServe) {
  WorkerConfig no_secret;
  absl::Status status = CheckAndResolveWorkerConfig(&no_secret);
  EXPECT_TRUE(absl::StrContains(status.message(), "--secret-fd or --secret-file")) << status;
  WorkerConfig named_host = WithSecret();
  named_host.collective_host = "worker-0.local";
  status = CheckAndResolveWorkerConfig(&named_host);
  EXPECT_TRUE(absl::StrContains(status.message(), "--collective-host must be an IPv4")) << status;
}

TEST(WorkerConfigTest, EachRangeIsCheckedAtBothEdges) {
  struct Edge {
    const char* flag;
    void (*set)(WorkerConfig&, double);
    double lowest;
    double highest;
  };
  const Edge edges[] = {
      {"rank", [](WorkerConfig& c, double v) { c.rank = static_cast<int>(v); }, 0,
       wire::kMaxWorldSize - 1},
      {"cuda-device", [](WorkerConfig& c, double v) { c.cuda_device = static_cast<int>(v); }, -1,
       1023},
      {"max-message-bytes",
       [](WorkerConfig& c, double v) { c.max_message_bytes = static_cast<int>(v); },
       wire::kMinWorkerReceiveLimitBytes, wire::kMaxWorkerMessageBytes},
      {"owner-timeout", [](WorkerConfig& c, double v) { c.owner_timeout = v; }, 1, 86400},
      {"secret-fd", [](WorkerConfig& c, double v) { c.secret_fd = static_cast<int>(v); }, -1,
       1 << 20},
      {"parent-pid", [](WorkerConfig& c, double v) { c.parent_pid = static_cast<int>(v); }, 0,
       1 << 22},
      {"step-fd", [](WorkerConfig& c, double v) { c.step_fd = static_cast<int>(v); }, -1, 1 << 20},
      {"metrics-port", [](WorkerConfig& c, double v) { c.metrics_port = static_cast<int>(v); }, -1,
       65535},
  };
  for (const Edge& edge : edges) {
    SCOPED_TRACE(edge.flag);
    for (double value : {edge.lowest, edge.highest}) {
      WorkerConfig config = WithSecret();
      edge.set(config, value);
      EXPECT_TRUE(CheckAndResolveWorkerConfig(&config).ok()) << value;
    }
    for (double value : {edge.lowest - 1, edge.highest + 1}) {
      WorkerConfig config = WithSecret();
      edge.set(config, value);
      const absl::Status status = CheckAndResolveWorkerConfig(&config);
      EXPECT_TRUE(absl::StartsWith(status.message(), absl::StrCat("--", edge.flag, " ")))
          << value << ": " << status;
      EXPECT_TRUE(absl::StrContains(status.message(), "expected")) << status;
    }
  }
}

}  // namespace
}  // namespace pagoda::worker
