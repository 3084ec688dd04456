#include "scheduler/kv_events/publisher.h"

#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "scheduler/engine/sequence.h"
#include "scheduler/kv/block_manager.h"
#include "scheduler/kv_events/msgpack_writer.h"
#include "tests/support/kv_event_list.h"

namespace pagoda::scheduler {
namespace {

using Kind = KvCacheEvent::Kind;

std::unique_ptr<SequenceGroup> MakeGroup(int64_t seq_id, std::vector<int32_t> prompt) {
  return std::make_unique<SequenceGroup>("req" + std::to_string(seq_id), std::move(prompt), seq_id,
                                         SamplingOptions{}, StoppingOptions{}, absl::Now());
}

// What a subscriber holds after applying `events` in order.
void Apply(const std::vector<KvCacheEvent>& events, absl::flat_hash_set<uint64_t>& cached) {
  for (const KvCacheEvent& event : events) {
    switch (event.kind) {
      case Kind::kBlockStored:
        for (uint64_t hash : event.block_hashes) EXPECT_TRUE(cached.insert(hash).second);
        EXPECT_EQ(event.token_ids.size(), event.block_hashes.size() * event.block_size);
        break;
      case Kind::kBlockRemoved:
        for (uint64_t hash : event.block_hashes) EXPECT_EQ(cached.erase(hash), 1u);
        break;
      case Kind::kAllBlocksCleared:
        cached.clear();
        break;
    }
  }
}

absl::flat_hash_set<uint64_t> ServerSet(const BlockManager& manager) {
  const std::vector<uint64_t> hashes = manager.CachedBlockHashes();
  return absl::flat_hash_set<uint64_t>(hashes.begin(), hashes.end());
}

TEST(KvEventsTest, CommitStoresOneChainWithItsParentAndTokens) {
  BlockManager manager(/*block_size=*/4, /*num_gpu_blocks=*/8, 0, 0.0, true);
  manager.EnableKvEvents();
  std::vector<int32_t> prompt(10);
  std::iota(prompt.begin(), prompt.end(), 100);
  auto group = MakeGroup(1, prompt);
  ASSERT_TRUE(manager.Allocate(*group).ok());
  Sequence& seq = *group->seqs()[0];
  seq.set_num_computed_tokens(10);
  manager.CommitComputedBlocks(seq);
  std::vector<KvCacheEvent> events = TakeKvEvents(manager);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, Kind::kBlockStored);
  EXPECT_FALSE(events[0].parent_hash.has_value());
  ASSERT_EQ(events[0].block_hashes.size(), 2u);
  EXPECT_EQ(events[0].block_hashes[0], DefaultBlockHash(0, {100, 101, 102, 103}));
  EXPECT_EQ(events[0].block_hashes[1],
            DefaultBlockHash(events[0].block_hashes[0], {104, 105, 106, 107}));
  EXPECT_EQ(events[0].token_ids, std::vector<int32_t>(prompt.begin(), prompt.begin() + 8));
  EXPECT_EQ(events[0].block_size, 4);
  EXPECT_TRUE(TakeKvEvents(manager).empty());
}

// Random prompts over a few shared prefixes in a small pool: hits,
// evictions, frees and a reset; after every operation the replayed set is
// the pool's set of cached hashes.
TEST(KvEventsTest, ReplayedEventsTrackTheCacheThroughEvictionAndReset) {
  BlockManager manager(/*block_size=*/4, /*num_gpu_blocks=*/24, 0, 0.0, true);
  manager.EnableKvEvents();
  std::mt19937 rng(7);
  absl::flat_hash_set<uint64_t> replayed;
  std::vector<std::unique_ptr<SequenceGroup>> live;
  int64_t next_id = 0;
  int evictions = 0;
  for (int op = 0; op < 2000; ++op) {
    const int choice = static_cast<int>(rng() % 10);
    if (choice < 5 || live.empty()) {
      std::vector<int32_t> prompt(4 + rng() % 20);
      const int prefix = static_cast<int>(rng() % 3);
      for (size_t i = 0; i < prompt.size(); ++i) {
        prompt[i] = i < 12 ? prefix * 1000 + static_cast<int>(i) : static_cast<int>(rng() % 50);
      }
      auto group = MakeGroup(next_id++, prompt);
      if (manager.CanAllocate(*group) != AllocStatus::kOk) continue;
      ASSERT_TRUE(manager.Allocate(*group).ok());
      for (Sequence* seq : group->SeqsWithStatus(SequenceStatus::kWaiting)) {
        seq->set_status(SequenceStatus::kRunning);
        seq->set_num_computed_tokens(seq->length());
        manager.CommitComputedBlocks(*seq);
      }
      live.push_back(std::move(group));
    } else if (choice < 9) {
      const size_t victim = rng() % live.size();
      manager.Free(live[victim]->seqs()[0]->seq_id());
      live.erase(live.begin() + victim);
    } else if (op % 500 == 499) {
      manager.ResetPrefixCache();
    }
    const std::vector<KvCacheEvent> events = TakeKvEvents(manager);
    for (const KvCacheEvent& event : events) evictions += event.kind == Kind::kBlockRemoved;
    Apply(events, replayed);
    ASSERT_EQ(replayed, ServerSet(manager)) << "after operation " << op;
  }
  EXPECT_GT(evictions, 10);
  // A full resync rebuilds the same set from nothing.
  absl::flat_hash_set<uint64_t> resynced = {12345};
  Apply(ToEvents(manager.CachedBlocksAsEvents()), resynced);
  EXPECT_EQ(resynced, ServerSet(manager));
}

TEST(KvEventsTest, ResetSendsAllBlocksCleared) {
  BlockManager manager(4, 8, 0, 0.0, true);
  manager.EnableKvEvents();
  auto group = MakeGroup(1, {1, 2, 3, 4, 5});
  ASSERT_TRUE(manager.Allocate(*group).ok());
  group->seqs()[0]->set_num_computed_tokens(5);
  manager.CommitComputedBlocks(*group->seqs()[0]);
  manager.ResetPrefixCache();
  const std::vector<KvCacheEvent> events = TakeKvEvents(manager);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].kind, Kind::kAllBlocksCleared);
  EXPECT_TRUE(manager.CachedBlockHashes().empty());
}

TEST(KvEventsTest, NoEventsWithoutPrefixCaching) {
  BlockManager manager(4, 8, 0, 0.0, /*enable_prefix_caching=*/false);
  manager.EnableKvEvents();
  EXPECT_FALSE(manager.kv_events_enabled());
}

TEST(MsgpackWriterTest, SmallestForms) {
  MsgpackWriter out;
  out.Uint(5);
  out.Uint(200);
  out.Uint(70000);
  out.Uint(0xffffffffffffffffULL);
  out.Int(-1);
  out.Int(-100);
  out.Nil();
  out.Str("GPU");
  out.Array(2);
  EXPECT_EQ(out.bytes(), std::string("\x05\xcc\xc8\xce\x00\x01\x11\x70"
                                     "\xcf\xff\xff\xff\xff\xff\xff\xff\xff"
                                     "\xff\xd0\x9c\xc0\xa3GPU\x92",
                                     26));
}

TEST(KvEventPublisherTest, EncodesVllmArrayLayout) {
  KvEventBatch batch;
  batch.AddStored(std::nullopt, 2);
  batch.AppendStoredBlock(7, {1, 2});
  batch.AddRemoved(7);
  batch.AddCleared();
  const std::string bytes = KvEventPublisher::EncodeBatch(0.0, batch, 0);
  const std::string expected =
      absl::StrCat(std::string("\x93\xcb\0\0\0\0\0\0\0\0\x93", 11),
                   "\x98\xab" "BlockStored" "\x91\x07\xc0\x92\x01\x02\x02\xc0\xa3GPU\xc0",
                   "\x93\xac" "BlockRemoved" "\x91\x07\xa3GPU",
                   "\x91\xb0" "AllBlocksCleared", std::string("\0", 1));
  EXPECT_EQ(bytes, expected);
}

// An adapter's blocks carry its id where vLLM's events put lora_id (the
// sixth field), as a positive fixint; the base model's stay nil.
TEST(KvEventPublisherTest, EncodesTheAdaptersLoraId) {
  KvEventBatch batch;
  batch.AddStored(std::nullopt, 2, /*lora_id=*/5);
  batch.AppendStoredBlock(7, {1, 2});
  const std::string bytes = KvEventPublisher::EncodeBatch(0.0, batch, 0);
  EXPECT_EQ(bytes,
            absl::StrCat(std::string("\x93\xcb\0\0\0\0\0\0\0\0\x91", 11),
                         "\x98\xab" "BlockStored" "\x91\x07\xc0\x92\x01\x02\x02\x05\xa3GPU\xc0",
                         std::string("\0", 1)));
  EXPECT_EQ(ToEvents(batch)[0].lora_id, 5);
}

// With a name for it, the adapter's blocks carry it as lora_name (the
// eighth field; vLLM keys adapters by name); an id without one stays nil.
TEST(KvEventPublisherTest, EncodesTheAdaptersLoraName) {
  KvEventBatch batch;
  batch.AddStored(std::nullopt, 2, /*lora_id=*/5);
  batch.AppendStoredBlock(7, {1, 2});
  batch.AddStored(7, 2, /*lora_id=*/6);
  batch.AppendStoredBlock(8, {3, 4});
  const auto name_of = [](int lora_id) { return lora_id == 5 ? std::string("sql") : ""; };
  const std::string bytes = KvEventPublisher::EncodeBatch(0.0, batch, 0, name_of);
  EXPECT_EQ(bytes,
            absl::StrCat(std::string("\x93\xcb\0\0\0\0\0\0\0\0\x92", 11),
                         "\x98\xab" "BlockStored" "\x91\x07\xc0\x92\x01\x02\x02\x05\xa3GPU\xa3sql",
                         "\x98\xab" "BlockStored" "\x91\x08\x07\x92\x03\x04\x02\x06\xa3GPU\xc0",
                         std::string("\0", 1)));
}

std::vector<std::string> RecvMultipart(void* socket) {
  std::vector<std::string> frames;
  int more = 1;
  while (more) {
    zmq_msg_t message;
    zmq_msg_init(&message);
    if (zmq_msg_recv(&message, socket, 0) < 0) return {};
    frames.emplace_back(static_cast<const char*>(zmq_msg_data(&message)), zmq_msg_size(&message));
    zmq_msg_close(&message);
    size_t size = sizeof(more);
    zmq_getsockopt(socket, ZMQ_RCVMORE, &more, &size);
  }
  return frames;
}

std::string Seq(int64_t seq) {
  std::string bytes(8, '\0');
  for (int i = 7; i >= 0; --i, seq >>= 8) bytes[i] = static_cast<char>(seq & 0xff);
  return bytes;
}

TEST(KvEventPublisherTest, PublishesNumberedBatchesAndReplays) {
  void* context = zmq_ctx_new();
  void* sub = zmq_socket(context, ZMQ_SUB);
  const int timeout_ms = 5000;
  zmq_setsockopt(sub, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
  zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "kv@", 3);
  ASSERT_EQ(zmq_bind(sub, "tcp://127.0.0.1:*"), 0);
  char endpoint[256];
  size_t size = sizeof(endpoint);
  zmq_getsockopt(sub, ZMQ_LAST_ENDPOINT, endpoint, &size);
  {
    KvEventPublisherOptions options;
    options.endpoint = endpoint;  // No wildcard: the publisher connects.
    options.replay_endpoint = "tcp://127.0.0.1:*";
    options.topic = "kv@pod@model";
    absl::StatusOr<std::unique_ptr<KvEventPublisher>> publisher =
        KvEventPublisher::Start(options);
    ASSERT_TRUE(publisher.ok()) << publisher.status();
    // A PUB socket drops what it sends before the connection is up: probe
    // until one arrives, then drain what is still on the way.
    auto cleared = [] {
      KvEventBatch batch;
      batch.AddCleared();
      return batch;
    };
    const int short_ms = 200;
    zmq_setsockopt(sub, ZMQ_RCVTIMEO, &short_ms, sizeof(short_ms));
    int64_t last = -1;
    for (int probe = 0; probe < 50 && last < 0; ++probe) {
      KvEventBatch batch = cleared();
      ASSERT_TRUE((*publisher)->TryPublish(batch));
      EXPECT_TRUE(batch.empty());
      for (std::vector<std::string> frames = RecvMultipart(sub); !frames.empty();
           frames = RecvMultipart(sub)) {
        last = 0;
        for (unsigned char byte : frames[1]) last = (last << 8) | byte;
      }
    }
    ASSERT_GE(last, 0) << "the subscriber never connected";
    zmq_setsockopt(sub, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
    for (int i = 0; i < 3; ++i) {
      KvEventBatch batch = cleared();
      ASSERT_TRUE((*publisher)->TryPublish(batch));
    }
    for (int i = 1; i <= 3; ++i) {
      const std::vector<std::string> frames = RecvMultipart(sub);
      ASSERT_EQ(frames.size(), 3u);
      EXPECT_EQ(frames[0], "kv@pod@model");
      EXPECT_EQ(frames[1], Seq(last + i));
      EXPECT_EQ(frames[2].substr(0, 2), "\x93\xcb");
    }
    // A DEALER sends what a REQ would ("", start) and reads every reply.
    void* dealer = zmq_socket(context, ZMQ_DEALER);
    zmq_setsockopt(dealer, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
    ASSERT_EQ(zmq_connect(dealer, (*publisher)->replay_endpoint().c_str()), 0);
    const std::string start = Seq(last + 2);
    ASSERT_EQ(zmq_send(dealer, "", 0, ZMQ_SNDMORE), 0);
    ASSERT_EQ(zmq_send(dealer, start.data(), start.size(), 0), 8);
    for (int64_t expected : {last + 2, last + 3, int64_t{-1}}) {
      const std::vector<std::string> reply = RecvMultipart(dealer);
      ASSERT_EQ(reply.size(), 3u);
      EXPECT_EQ(reply[0], "");
      EXPECT_EQ(reply[1], Seq(expected));
      EXPECT_EQ(reply[2].empty(), expected < 0);
    }
    const int no_linger = 0;
    zmq_setsockopt(dealer, ZMQ_LINGER, &no_linger, sizeof(no_linger));
    zmq_close(dealer);
    EXPECT_EQ((*publisher)->num_published(), last + 4);
  }
  zmq_close(sub);
  zmq_ctx_term(context);
}

// ZeroMQ's PUB drops what it sends while no subscription has arrived. Here
// a bound publisher holds what it publishes before the first subscriber
// connects, and while the only one is away: every batch arrives, in order
// and without a gap, once a subscriber is there.
TEST(KvEventPublisherTest, HoldsBatchesUntilASubscriberIsThere) {
  const std::string endpoint = absl::StrCat("ipc:///tmp/pagoda-kv-hold-", getpid(), ".sock");
  KvEventPublisherOptions options;
  options.endpoint = endpoint;  // ipc://: bound, subscribers connect.
  options.topic = "kv@hold@model";
  absl::StatusOr<std::unique_ptr<KvEventPublisher>> publisher = KvEventPublisher::Start(options);
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  void* context = zmq_ctx_new();
  auto connected_sub = [&] {
    void* sub = zmq_socket(context, ZMQ_SUB);
    const int timeout_ms = 5000;
    zmq_setsockopt(sub, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
    const int no_linger = 0;
    zmq_setsockopt(sub, ZMQ_LINGER, &no_linger, sizeof(no_linger));
    zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "kv@", 3);
    EXPECT_EQ(zmq_connect(sub, endpoint.c_str()), 0);
    return sub;
  };
  auto publish = [&publisher] {
    KvEventBatch batch;
    batch.AddCleared();
    ASSERT_TRUE((*publisher)->TryPublish(batch));
  };
  auto expect_seqs = [](void* from, int64_t first, int64_t last) {
    for (int64_t seq = first; seq <= last; ++seq) {
      const std::vector<std::string> frames = RecvMultipart(from);
      ASSERT_EQ(frames.size(), 3u) << "batch " << seq << " never arrived";
      EXPECT_EQ(frames[1], Seq(seq));
    }
  };
  for (int i = 0; i < 3; ++i) publish();  // Before any subscriber.
  void* sub = connected_sub();
  expect_seqs(sub, 0, 2);
  EXPECT_TRUE((*publisher)->subscribed());
  zmq_close(sub);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while ((*publisher)->subscribed() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_FALSE((*publisher)->subscribed()) << "the subscriber's leaving went unnoticed";
  for (int i = 0; i < 2; ++i) publish();  // While it is away.
  sub = connected_sub();
  publish();
  expect_seqs(sub, 3, 5);
  // The publisher thread counts a batch after sending it: the subscriber may
  // hold the sixth before the count does.
  const absl::Time counted = absl::Now() + absl::Seconds(10);
  while ((*publisher)->num_published() < 6 && absl::Now() < counted) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ((*publisher)->num_published(), 6);
  publisher->reset();
  zmq_close(sub);
  zmq_ctx_term(context);
}

// Subscriptions come from the network: a peer flooding distinct prefixes
// past the tracked bound makes the publisher send as a plain PUB would, so
// the subscriber among them that matches still gets every batch.
TEST(KvEventPublisherTest, AFloodOfSubscriptionsDoesNotHoldBatches) {
  const std::string endpoint = absl::StrCat("ipc:///tmp/pagoda-kv-flood-", getpid(), ".sock");
  KvEventPublisherOptions options;
  options.endpoint = endpoint;
  options.topic = "kv@flood@model";
  absl::StatusOr<std::unique_ptr<KvEventPublisher>> publisher = KvEventPublisher::Start(options);
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  void* context = zmq_ctx_new();
  void* sub = zmq_socket(context, ZMQ_SUB);
  const int timeout_ms = 5000;
  zmq_setsockopt(sub, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
  const int no_linger = 0;
  zmq_setsockopt(sub, ZMQ_LINGER, &no_linger, sizeof(no_linger));
  for (int i = 0; i < 5000; ++i) {
    const std::string prefix = absl::StrCat("other-", i);
    zmq_setsockopt(sub, ZMQ_SUBSCRIBE, prefix.data(), prefix.size());
  }
  zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "kv@", 3);
  ASSERT_EQ(zmq_connect(sub, endpoint.c_str()), 0);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!(*publisher)->subscribed() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_TRUE((*publisher)->subscribed());
  for (int i = 0; i < 3; ++i) {
    KvEventBatch batch;
    batch.AddCleared();
    ASSERT_TRUE((*publisher)->TryPublish(batch));
  }
  for (int64_t seq = 0; seq < 3; ++seq) {
    const std::vector<std::string> frames = RecvMultipart(sub);
    ASSERT_EQ(frames.size(), 3u) << "batch " << seq << " never arrived";
    EXPECT_EQ(frames[1], Seq(seq));
  }
  publisher->reset();
  zmq_close(sub);
  zmq_ctx_term(context);
}

// 2,000 batches a second of 20 events each for two seconds, to a real
// subscriber: every one arrives, numbered without a gap, none refused.
TEST(KvEventPublisherTest, NoGapAtTwoThousandBatchesPerSecond) {
  void* context = zmq_ctx_new();
  void* sub = zmq_socket(context, ZMQ_SUB);
  const int timeout_ms = 200;
  zmq_setsockopt(sub, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
  zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0);
  ASSERT_EQ(zmq_bind(sub, "tcp://127.0.0.1:*"), 0);
  char endpoint[256];
  size_t size = sizeof(endpoint);
  zmq_getsockopt(sub, ZMQ_LAST_ENDPOINT, endpoint, &size);
  KvEventPublisherOptions options;
  options.endpoint = endpoint;
  options.topic = "kv@rate@model";
  absl::StatusOr<std::unique_ptr<KvEventPublisher>> publisher = KvEventPublisher::Start(options);
  ASSERT_TRUE(publisher.ok());
  auto batch_of_20 = [](int i) {
    KvEventBatch batch;
    for (int e = 0; e < 20; ++e) {
      batch.AddStored(static_cast<uint64_t>(i), 16);
      std::vector<int32_t> tokens(16, e);
      batch.AppendStoredBlock(static_cast<uint64_t>(i) * 100 + e, tokens);
    }
    return batch;
  };
  // Connected once a probe gets through.
  int64_t first = -1;
  for (int probe = 0; probe < 50 && first < 0; ++probe) {
    KvEventBatch batch = batch_of_20(0);
    ASSERT_TRUE((*publisher)->TryPublish(batch));
    for (std::vector<std::string> frames = RecvMultipart(sub); !frames.empty();
         frames = RecvMultipart(sub)) {
      first = 0;
      for (unsigned char byte : frames[1]) first = (first << 8) | byte;
    }
  }
  ASSERT_GE(first, 0);
  constexpr int kBatches = 4000;
  std::thread producer([&] {
    const absl::Time start = absl::Now();
    for (int i = 0; i < kBatches; ++i) {
      absl::SleepFor(start + absl::Microseconds(500) * i - absl::Now());  // 2,000 a second.
      KvEventBatch batch = batch_of_20(i);
      EXPECT_TRUE((*publisher)->TryPublish(batch));
    }
  });
  int64_t expected = first + 1;
  int received = 0;
  for (std::vector<std::string> frames = RecvMultipart(sub); !frames.empty() && received < kBatches;
       frames = RecvMultipart(sub)) {
    int64_t seq = 0;
    for (unsigned char byte : frames[1]) seq = (seq << 8) | byte;
    ASSERT_EQ(seq, expected) << "gap after " << received << " batches";
    ++expected;
    ++received;
  }
  producer.join();
  EXPECT_EQ(received, kBatches);
  EXPECT_EQ((*publisher)->num_refused(), 0);
  publisher->reset();
  zmq_close(sub);
  zmq_ctx_term(context);
}

}  // namespace
}  // namespace pagoda::scheduler
