#ifndef PAGODA_SCHEDULER_KV_EVENTS_PUBLISHER_H_
#define PAGODA_SCHEDULER_KV_EVENTS_PUBLISHER_H_

// KvEventPublisher: KV cache events published over ZeroMQ as vLLM's
// ZmqEventPublisher does (PUB socket, replay ROUTER, bounded queue).

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "scheduler/kv_event_types/kv_events.h"

namespace pagoda::scheduler {

struct KvEventPublisherOptions {
  // The PUB socket, as vLLM's ZmqEventPublisher reads it: an endpoint with
  // '*' or '::' in it, or ipc:// / inproc://, is bound (tcp://*:5557);
  // anything else is connected to (tcp://indexer:5557, where a subscriber
  // such as llm-d's KV-cache indexer binds).
  std::string endpoint;
  // ROUTER socket answering replay requests, always bound; "" = none.
  // "tcp://127.0.0.1:*" binds any free port (replay_endpoint() says which).
  std::string replay_endpoint;
  // First frame of every message (llm-d reads "kv@<pod>@<model>").
  std::string topic;
  // Batches waiting for the publisher thread beyond which TryPublish
  // refuses (the engine then resyncs; see KvEventSink).
  int max_queued_batches = 1024;
  // Published batches kept for replay.
  int replay_buffer_batches = 10000;
  // ZeroMQ's send high-water mark of the PUB socket, in messages.
  int send_high_water_mark = 100000;
  // The batch's data_parallel_rank field.
  int data_parallel_rank = 0;
  // Batches held while no subscriber to the topic is connected, sent in
  // order once one is (beyond this many, the oldest are dropped).
  int max_held_batches = 10000;
  // A LoRA adapter's name by its id, for BlockStored's lora_name (vLLM keys
  // adapters by name); "" when unknown. Null: lora_name stays nil. Called on
  // the publisher's thread, so it must be thread-safe.
  std::function<std::string(int lora_id)> lora_name_of;
};

// Publishes KV cache events as vLLM does (vllm/distributed/kv_events.py,
// ZmqEventPublisher): one ZeroMQ message per batch, three frames
//   topic | sequence number (8 bytes, big-endian, from 0) | msgpack payload
// with the payload in vLLM's array layout (docs/kv-events.md):
//   [ts, [event, ...], data_parallel_rank]
//   ["BlockStored", [hash, ...], parent_hash|nil, [token_id, ...],
//    block_size, lora_id|nil, medium="GPU", lora_name|nil]
//   ["BlockRemoved", [hash, ...], medium="GPU"]
//   ["AllBlocksCleared"]
// A replay request on the ROUTER socket (the start sequence number as 8
// big-endian bytes, from a REQ socket) is answered with every kept batch
// from that number on, each as [seq, payload], then [-1 as 8 bytes, ""].
//
// ZeroMQ's PUB socket drops what it sends while no subscription to it has
// arrived: at start, while a subscriber reconnects, or when the send races
// the connection. So the socket is an XPUB, which reports every subscribe
// and unsubscribe (a peer's unsubscribes come when it disconnects): while no
// subscriber's prefix matches the topic, batches are held and then sent in
// order, so a subscriber that was ever listening gets every batch, gap-free.
// Heartbeats end a connection whose peer went silent, and the connecting
// side reconnects.
//
// TryPublish only queues (the engine thread never waits on the network); a
// thread of its own encodes, sends and serves replays. Thread-safe.
class KvEventPublisher : public KvEventSink {
 public:
  // INVALID_ARGUMENT for an endpoint ZeroMQ refuses, UNAVAILABLE when one
  // cannot be bound.
  static absl::StatusOr<std::unique_ptr<KvEventPublisher>> Start(KvEventPublisherOptions options);
  // Sends what is queued (at most ~1 s more), then closes the sockets.
  ~KvEventPublisher() override;
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  bool TryPublish(KvEventBatch& events) override;

  // The replay socket's bound endpoint ("" without one).
  const std::string& replay_endpoint() const { return replay_bound_; }
  // Batches sent, and batches refused because the queue was full.
  int64_t num_published() const;
  int64_t num_refused() const;
  // Whether a subscriber to the topic was connected at the last look.
  bool subscribed() const { return subscribed_.load(std::memory_order_relaxed); }

  // One batch's payload in vLLM's layout; `lora_name_of` may be null.
  static std::string EncodeBatch(double timestamp, const KvEventBatch& events,
                                 int data_parallel_rank,
                                 const std::function<std::string(int)>& lora_name_of = nullptr);

 private:
  struct Batch {
    double timestamp;
    KvEventBatch events;
  };
  explicit KvEventPublisher(KvEventPublisherOptions options);
  absl::Status OpenSockets();
  void Run();
  void Send(const Batch& batch);
  // Reads the XPUB's subscription messages into subscriptions_; true when
  // some subscription matches the topic.
  bool ReadSubscriptions();
  void SendHeld();
  void ServeReplay();

  const KvEventPublisherOptions options_;
  void* context_ = nullptr;
  void* pub_ = nullptr;
  void* replay_ = nullptr;
  std::string replay_bound_;

  // Publisher thread only.
  uint64_t next_seq_ = 0;
  std::deque<std::pair<uint64_t, std::string>> replay_buffer_;
  // Subscribed prefixes (a peer may hold several), by how many hold each.
  std::map<std::string, int> subscriptions_;
  // Some subscription matches the topic (read by subscribed() too).
  std::atomic<bool> subscribed_{false};
  // Batches published while none did, waiting for one.
  std::deque<std::pair<uint64_t, std::string>> held_;

  mutable absl::Mutex mu_;
  std::deque<Batch> queue_ ABSL_GUARDED_BY(mu_);
  // Sent batches, emptied, handed back to TryPublish's caller for reuse.
  std::vector<KvEventBatch> recycled_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t published_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_KV_EVENTS_PUBLISHER_H_
