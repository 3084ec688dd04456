#include "scheduler/config/kv_events_config.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "scheduler/config/server_flags.h"

namespace pagoda::scheduler {
namespace {

TEST(KvEventsConfigTest, EnabledAloneTakesVllmsDefaults) {
  absl::StatusOr<KvEventOptions> events =
      ParseKvEventsConfig(R"({"enable_kv_cache_events": true})");
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(events->endpoint, "tcp://*:5557");
  EXPECT_EQ(events->replay_endpoint, "");
  EXPECT_EQ(events->topic, "");  // kv@<pod>@<model> at start-up.
  EXPECT_EQ(events->replay_buffer, 10000);
  EXPECT_EQ(events->send_high_water_mark, 100000);
  EXPECT_EQ(events->queue_batches, 100000);
}

TEST(KvEventsConfigTest, ReadsTheObjectLlmdsGuidesPass) {
  absl::StatusOr<KvEventOptions> events = ParseKvEventsConfig(
      R"({"enable_kv_cache_events": true, "publisher": "zmq",
          "endpoint": "tcp://indexer.ns.svc.cluster.local:5557", "topic": "kv@10.0.0.7@m",
          "replay_endpoint": "tcp://*:5558", "buffer_steps": 0, "hwm": 7,
          "max_queue_size": 64})");
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(events->endpoint, "tcp://indexer.ns.svc.cluster.local:5557");
  EXPECT_EQ(events->topic, "kv@10.0.0.7@m");
  EXPECT_EQ(events->replay_endpoint, "tcp://*:5558");
  EXPECT_EQ(events->replay_buffer, 0);
  EXPECT_EQ(events->send_high_water_mark, 7);
  EXPECT_EQ(events->queue_batches, 64);
}

TEST(KvEventsConfigTest, NotEnabledOrTheNullPublisherIsOff) {
  for (const char* json : {"{}", R"({"publisher": "zmq"})", R"({"enable_kv_cache_events": false})",
                           R"({"enable_kv_cache_events": true, "publisher": "null"})",
                           R"({"enable_kv_cache_events": null, "endpoint": "tcp://*:1"})"}) {
    absl::StatusOr<KvEventOptions> events = ParseKvEventsConfig(json);
    ASSERT_TRUE(events.ok()) << json << ": " << events.status();
    EXPECT_EQ(events->endpoint, "") << json;
  }
}

TEST(KvEventsConfigTest, RefusesBadObjectsInOneLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"{", "--kv-events-config: not valid JSON"},
      {"[1]", "--kv-events-config: must be a JSON object"},
      {R"({"enable_kv_cache_events": true, "endpoints": "x"})",
       "--kv-events-config: unknown key \"endpoints\""},
      {R"({"enable_kv_cache_events": "yes"})",
       "--kv-events-config: enable_kv_cache_events must be true or false"},
      {R"({"publisher": "nats"})",
       "--kv-events-config: publisher \"nats\": expected \"zmq\" or \"null\""},
      {R"({"enable_kv_cache_events": true, "topic": 5})",
       "--kv-events-config: topic must be a string"},
      {R"({"enable_kv_cache_events": true, "endpoint": ""})",
       "--kv-events-config: endpoint must not be empty"},
      {R"({"buffer_steps": "10"})", "--kv-events-config: buffer_steps must be an integer"},
      {R"({"hwm": 0})", "--kv-events-config.hwm 0 is out of range: expected 1 to 1048576"},
      {R"({"max_queue_size": 99999999999})",
       "--kv-events-config: max_queue_size 99999999999 is out of range"},
      {R"({"buffer_steps": -1})",
       "--kv-events-config.buffer_steps -1 is out of range: expected 0 to 1048576"},
  };
  for (const auto& [json, message] : cases) {
    EXPECT_EQ(ParseKvEventsConfig(json).status().message(), message) << json;
  }
}

TEST(KvEventsConfigTest, TheFlagReplacesTheKvEventFlagsAndIsCheckedAsThey) {
  absl::FlagSaver saver;
  std::string error;
  ASSERT_TRUE(absl::FindCommandLineFlag("model")->ParseFrom("/m", &error));
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag("kv_events_config");
  ASSERT_NE(flag, nullptr);
  ASSERT_TRUE(flag->ParseFrom(
      R"({"enable_kv_cache_events": true, "endpoint": "tcp://127.0.0.1:5557"})", &error));
  absl::StatusOr<ServerConfig> config = ServerConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->kv_events.endpoint, "tcp://127.0.0.1:5557");
  // Events need prefix caching, whichever form asked for them.
  ASSERT_TRUE(absl::FindCommandLineFlag("enable_prefix_caching")->ParseFrom("false", &error));
  EXPECT_TRUE(absl::StrContains(ServerConfigFromFlags().status().message(), "need prefix caching"));
  ASSERT_TRUE(absl::FindCommandLineFlag("enable_prefix_caching")->ParseFrom("true", &error));
  // One form at a time.
  ASSERT_TRUE(absl::FindCommandLineFlag("kv_events_topic")->ParseFrom("kv@p@m", &error));
  EXPECT_EQ(ServerConfigFromFlags().status().message(),
            "--kv-events-config and --kv-events-topic set the same options: give "
            "--kv-events-config alone, or the --kv-events-* flags");
}

}  // namespace
}  // namespace pagoda::scheduler
