// vllm:lora_requests_info as vLLM writes it: labels max_lora and the
// comma-joined adapter names of running and waiting requests, value the
// time of the update; old label sets stay as series with their last time,
// up to kMaxLoraInfoSeries. And through /metrics: served at each scrape
// from the engine's snapshot once it reports LoRA, never without it.

#include "scheduler/lora_metrics.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "scheduler/metrics.h"
#include "tests/integration/server_process.h"

namespace pagoda::scheduler {
namespace {

// The series of the family: "max_lora|running|waiting" -> value.
std::map<std::string, double> Series(prometheus::Registry& registry) {
  std::map<std::string, double> series;
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name != "vllm:lora_requests_info") continue;
    EXPECT_EQ(family.type, prometheus::MetricType::Gauge);
    for (const prometheus::ClientMetric& metric : family.metric) {
      std::map<std::string, std::string> labels;
      for (const auto& label : metric.label) labels[label.name] = label.value;
      EXPECT_EQ(labels.size(), 3u);
      series[absl::StrCat(labels["max_lora"], "|", labels["running_lora_adapters"], "|",
                          labels["waiting_lora_adapters"])] = metric.gauge.value;
    }
  }
  return series;
}

TEST(LoraRequestsInfoTest, EachLabelSetKeepsTheTimeItWasLastCurrent) {
  prometheus::Registry registry;
  LoraRequestsInfo info(registry);
  const absl::Time t0 = absl::FromUnixSeconds(1'700'000'000);
  info.Update({2, {"sql", "chat"}, {"math"}}, t0);
  info.Update({2, {"math"}, {}}, t0 + absl::Seconds(1));
  info.Update({2, {"sql", "chat"}, {"math"}}, t0 + absl::Seconds(2));
  EXPECT_EQ(Series(registry), (std::map<std::string, double>{{"2|sql,chat|math", 1'700'000'002},
                                                             {"2|math|", 1'700'000'001}}));
  for (int i = 0; i < kMaxLoraInfoSeries + 5; ++i) {
    info.Update({2, {absl::StrCat("a", i)}, {}}, t0 + absl::Seconds(10 + i));
  }
  const std::map<std::string, double> bounded = Series(registry);
  EXPECT_EQ(bounded.size(), static_cast<size_t>(kMaxLoraInfoSeries));
  EXPECT_EQ(bounded.count("2|sql,chat|math"), 0u);  // The oldest went first.
  EXPECT_EQ(bounded.at(absl::StrCat("2|a", kMaxLoraInfoSeries + 4, "|")),
            1'700'000'010 + kMaxLoraInfoSeries + 4);
}

TEST(LoraRequestsInfoTest, ScrapedFromTheEngineSnapshotOnlyWhenLoraIsOn) {
  absl::StatusOr<std::unique_ptr<ServerMetrics>> metrics =
      ServerMetrics::Start("127.0.0.1", 0, "tiny", /*vllm_names=*/true);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EngineSnapshot snapshot;
  (*metrics)->SetSnapshotSource([&snapshot] { return snapshot; });
  absl::StatusOr<std::string> off = ::pagoda::testing::HttpGet((*metrics)->port(), "/metrics");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->find("vllm:lora_requests_info"), std::string::npos);
  snapshot.lora = {4, {"sql"}, {"chat", "math"}};
  const double before = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  absl::StatusOr<std::string> on = ::pagoda::testing::HttpGet((*metrics)->port(), "/metrics");
  ASSERT_TRUE(on.ok()) << on.status();
  const std::string series =
      "vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"sql\","
      "waiting_lora_adapters=\"chat,math\"} ";
  const size_t at = on->find(series);
  ASSERT_NE(at, std::string::npos) << *on;
  const double value = std::stod(on->substr(at + series.size()));
  EXPECT_GE(value, before - 1);
  EXPECT_LE(value, before + 60);
  (*metrics)->SetSnapshotSource(nullptr);
}

}  // namespace
}  // namespace pagoda::scheduler
