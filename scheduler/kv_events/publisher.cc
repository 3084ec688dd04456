#include "scheduler/kv_events/publisher.h"

#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "glog/logging.h"
#include "scheduler/kv_events/msgpack_writer.h"

namespace pagoda::scheduler {
namespace {

constexpr char kMediumGpu[] = "GPU";
// How long the publisher thread sleeps when it finds nothing queued: the
// most a batch waits before it is sent, and a replay request before it is
// answered.
constexpr absl::Duration kPollPeriod = absl::Milliseconds(1);
// Sent batches kept for reuse, and the largest kept.
constexpr size_t kRecycledBatches = 8;
constexpr size_t kRecycledBatchBytes = 1 << 20;
// How long closing sockets may take to send what they still hold.
constexpr int kLingerMs = 1000;
// ZMTP heartbeats: a connection whose peer answers none for the timeout is
// closed (and, when this side connected, opened again), so a subscriber that
// vanished without closing its connection is noticed.
constexpr int kHeartbeatIntervalMs = 1000;
constexpr int kHeartbeatTimeoutMs = 5000;
// Subscribers are peers on the network: what they send (subscriptions
// only) is bounded in size, and so is the number of prefixes tracked.
constexpr int64_t kMaxInboundMessageBytes = 4096;
constexpr size_t kMaxTrackedPrefixes = 4096;

std::string SeqBytes(int64_t seq) {
  std::string bytes(8, '\0');
  for (int i = 7; i >= 0; --i) {
    bytes[i] = static_cast<char>(static_cast<uint64_t>(seq) & 0xff);
    seq = static_cast<int64_t>(static_cast<uint64_t>(seq) >> 8);
  }
  return bytes;
}

std::string ZmqError() { return zmq_strerror(zmq_errno()); }

// vLLM's rule for the PUB socket: bind wildcards and local transports,
// connect to anything else.
bool ShouldBind(const std::string& endpoint) {
  return absl::StrContains(endpoint, "*") || absl::StrContains(endpoint, "::") ||
         absl::StartsWith(endpoint, "ipc://") || absl::StartsWith(endpoint, "inproc://");
}

void WriteHashes(absl::Span<const uint64_t> hashes, MsgpackWriter& out) {
  out.Array(hashes.size());
  for (uint64_t hash : hashes) out.Uint(hash);
}

void WriteEvent(const KvEventBatch& batch, const KvEventBatch::Event& event,
                const std::function<std::string(int)>& lora_name_of, MsgpackWriter& out) {
  switch (event.kind) {
    case KvEventKind::kBlockStored: {
      out.Array(8);
      out.Str("BlockStored");
      WriteHashes(batch.hashes(event), out);
      if (event.parent_hash.has_value()) {
        out.Uint(*event.parent_hash);
      } else {
        out.Nil();
      }
      const absl::Span<const int32_t> tokens = batch.tokens(event);
      out.Array(tokens.size());
      for (int32_t token : tokens) out.Int(token);
      out.Int(event.block_size);
      if (event.lora_id != 0) {
        out.Int(event.lora_id);
      } else {
        out.Nil();  // lora_id: the base model.
      }
      out.Str(kMediumGpu);
      const std::string name =
          event.lora_id != 0 && lora_name_of ? lora_name_of(event.lora_id) : std::string();
      if (name.empty()) {
        out.Nil();  // lora_name: the base model, or an adapter unloaded since.
      } else {
        out.Str(name);
      }
      return;
    }
    case KvEventKind::kBlockRemoved:
      out.Array(3);
      out.Str("BlockRemoved");
      WriteHashes(batch.hashes(event), out);
      out.Str(kMediumGpu);
      return;
    case KvEventKind::kAllBlocksCleared:
      out.Array(1);
      out.Str("AllBlocksCleared");
      return;
  }
}

// Sends `frames` as one multipart message; false (logged) on an error.
bool SendMultipart(void* socket, const std::vector<const std::string*>& frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    const int flags = i + 1 < frames.size() ? ZMQ_SNDMORE : 0;
    if (zmq_send(socket, frames[i]->data(), frames[i]->size(), flags) < 0) {
      LOG(WARNING) << "KV events: send failed: " << ZmqError();
      return false;
    }
  }
  return true;
}

}  // namespace

std::string KvEventPublisher::EncodeBatch(double timestamp, const KvEventBatch& events,
                                          int data_parallel_rank,
                                          const std::function<std::string(int)>& lora_name_of) {
  MsgpackWriter out;
  out.Array(3);
  out.Float64(timestamp);
  out.Array(events.size());
  for (const KvEventBatch::Event& event : events.events()) {
    WriteEvent(events, event, lora_name_of, out);
  }
  out.Int(data_parallel_rank);
  return out.Take();
}

KvEventPublisher::KvEventPublisher(KvEventPublisherOptions options)
    : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Start(
    KvEventPublisherOptions options) {
  if (options.max_queued_batches < 1 || options.replay_buffer_batches < 0) {
    return absl::InvalidArgumentError("KV events: the queue must hold at least one batch");
  }
  std::unique_ptr<KvEventPublisher> publisher(new KvEventPublisher(std::move(options)));
  if (absl::Status status = publisher->OpenSockets(); !status.ok()) return status;
  publisher->thread_ = std::thread([p = publisher.get()] { p->Run(); });
  return publisher;
}

absl::Status KvEventPublisher::OpenSockets() {
  context_ = zmq_ctx_new();
  if (context_ == nullptr) return absl::InternalError("KV events: no ZeroMQ context");
  pub_ = zmq_socket(context_, ZMQ_XPUB);
  const int hwm = options_.send_high_water_mark;
  zmq_setsockopt(pub_, ZMQ_SNDHWM, &hwm, sizeof(hwm));
  const int linger = kLingerMs;
  zmq_setsockopt(pub_, ZMQ_LINGER, &linger, sizeof(linger));
  // Every subscribe and unsubscribe, disconnections' included.
  const int verbose = 1;
  zmq_setsockopt(pub_, ZMQ_XPUB_VERBOSER, &verbose, sizeof(verbose));
  const int64_t max_inbound = kMaxInboundMessageBytes;
  zmq_setsockopt(pub_, ZMQ_MAXMSGSIZE, &max_inbound, sizeof(max_inbound));
  const int heartbeat = kHeartbeatIntervalMs;
  const int heartbeat_timeout = kHeartbeatTimeoutMs;
  zmq_setsockopt(pub_, ZMQ_HEARTBEAT_IVL, &heartbeat, sizeof(heartbeat));
  zmq_setsockopt(pub_, ZMQ_HEARTBEAT_TIMEOUT, &heartbeat_timeout, sizeof(heartbeat_timeout));
  zmq_setsockopt(pub_, ZMQ_HEARTBEAT_TTL, &heartbeat_timeout, sizeof(heartbeat_timeout));
  const std::string& endpoint = options_.endpoint;
  const bool bind = ShouldBind(endpoint);
  if ((bind ? zmq_bind(pub_, endpoint.c_str()) : zmq_connect(pub_, endpoint.c_str())) != 0) {
    const std::string message = absl::StrCat("--kv-events-endpoint ", endpoint, ": cannot ",
                                             bind ? "bind" : "connect", ": ", ZmqError());
    return zmq_errno() == EADDRINUSE ? absl::UnavailableError(message)
                                     : absl::InvalidArgumentError(message);
  }
  if (options_.replay_endpoint.empty()) return absl::OkStatus();
  replay_ = zmq_socket(context_, ZMQ_ROUTER);
  zmq_setsockopt(replay_, ZMQ_LINGER, &linger, sizeof(linger));
  // A ROUTER drops what goes past its high-water mark: a replay of the
  // whole buffer (and its end marker) must not be cut short.
  const int unlimited = 0;
  zmq_setsockopt(replay_, ZMQ_SNDHWM, &unlimited, sizeof(unlimited));
  if (zmq_bind(replay_, options_.replay_endpoint.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("--kv-events-replay-endpoint ",
                                               options_.replay_endpoint,
                                               ": cannot bind: ", ZmqError()));
  }
  char bound[256];
  size_t size = sizeof(bound);
  zmq_getsockopt(replay_, ZMQ_LAST_ENDPOINT, bound, &size);
  replay_bound_ = bound;
  return absl::OkStatus();
}

KvEventPublisher::~KvEventPublisher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  if (pub_ != nullptr) zmq_close(pub_);
  if (replay_ != nullptr) zmq_close(replay_);
  if (context_ != nullptr) zmq_ctx_term(context_);  // Waits up to the linger.
}

bool KvEventPublisher::TryPublish(KvEventBatch& events) {
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  absl::MutexLock lock(&mu_);
  if (static_cast<int>(queue_.size()) >= options_.max_queued_batches) {
    if (refused_++ % 1000 == 0) {
      LOG(WARNING) << "KV events: queue full (" << options_.max_queued_batches
                   << " batches); dropping events, a full resync follows";
    }
    return false;
  }
  queue_.push_back(Batch{now, std::move(events)});
  if (recycled_.empty()) {
    events = KvEventBatch();
  } else {
    events = std::move(recycled_.back());
    recycled_.pop_back();
  }
  return true;
}

int64_t KvEventPublisher::num_published() const {
  absl::MutexLock lock(&mu_);
  return published_;
}

int64_t KvEventPublisher::num_refused() const {
  absl::MutexLock lock(&mu_);
  return refused_;
}

void KvEventPublisher::Run() {
  while (true) {
    std::deque<Batch> batches;
    bool stopping;
    {
      absl::MutexLock lock(&mu_);
      batches.swap(queue_);
      stopping = stopping_;
    }
    // Polled rather than woken: TryPublish then never pays for waking this
    // thread (a futex call and, on a busy machine, a context switch).
    if (batches.empty() && !stopping) absl::SleepFor(kPollPeriod);
    if (ReadSubscriptions()) SendHeld();
    for (const Batch& batch : batches) Send(batch);
    if (!batches.empty()) {
      absl::MutexLock lock(&mu_);
      published_ += static_cast<int64_t>(batches.size());
      for (Batch& batch : batches) {
        // A few, and none grown huge by a resync, go back for reuse.
        if (recycled_.size() >= kRecycledBatches ||
            batch.events.capacity_bytes() > kRecycledBatchBytes) {
          continue;
        }
        batch.events.Clear();
        recycled_.push_back(std::move(batch.events));
      }
    }
    if (replay_ != nullptr) ServeReplay();
    if (stopping) {
      absl::MutexLock lock(&mu_);
      if (queue_.empty()) return;
    }
  }
}

void KvEventPublisher::Send(const Batch& batch) {
  const uint64_t seq = next_seq_++;
  std::string payload = EncodeBatch(batch.timestamp, batch.events, options_.data_parallel_rank,
                                    options_.lora_name_of);
  if (subscribed_.load(std::memory_order_relaxed)) {
    const std::string seq_bytes = SeqBytes(static_cast<int64_t>(seq));
    SendMultipart(pub_, {&options_.topic, &seq_bytes, &payload});
  } else {
    if (static_cast<int>(held_.size()) >= std::max(1, options_.max_held_batches)) {
      held_.pop_front();  // The subscriber will see the gap and replay.
    }
    held_.emplace_back(seq, payload);
  }
  if (options_.replay_buffer_batches == 0) return;
  if (static_cast<int>(replay_buffer_.size()) >= options_.replay_buffer_batches) {
    replay_buffer_.pop_front();
  }
  replay_buffer_.emplace_back(seq, std::move(payload));
}

bool KvEventPublisher::ReadSubscriptions() {
  while (true) {
    zmq_msg_t message;
    zmq_msg_init(&message);
    const int size = zmq_msg_recv(&message, pub_, ZMQ_DONTWAIT);
    if (size < 0) {
      zmq_msg_close(&message);
      break;
    }
    // [1 | prefix] subscribes, [0 | prefix] unsubscribes; nothing else
    // reaches an XPUB from SUB peers.
    const char* data = static_cast<const char*>(zmq_msg_data(&message));
    if (size >= 1 && (data[0] == 0 || data[0] == 1)) {
      std::string prefix(data + 1, static_cast<size_t>(size) - 1);
      auto it = subscriptions_.find(prefix);
      if (data[0] == 1 && it == subscriptions_.end() &&
          subscriptions_.size() < kMaxTrackedPrefixes) {
        it = subscriptions_.emplace(std::move(prefix), 0).first;
      }
      if (it != subscriptions_.end()) {
        it->second += data[0] == 1 ? 1 : -1;
        if (it->second <= 0) subscriptions_.erase(it);
      }
    }
    zmq_msg_close(&message);
  }
  // Past the bound, send as a plain PUB would rather than hold.
  bool matched = subscriptions_.size() >= kMaxTrackedPrefixes;
  for (const auto& [prefix, holders] : subscriptions_) {
    matched |= absl::StartsWith(options_.topic, prefix);
  }
  subscribed_.store(matched, std::memory_order_relaxed);
  return matched;
}

void KvEventPublisher::SendHeld() {
  for (const auto& [seq, payload] : held_) {
    const std::string seq_bytes = SeqBytes(static_cast<int64_t>(seq));
    SendMultipart(pub_, {&options_.topic, &seq_bytes, &payload});
  }
  held_.clear();
}

void KvEventPublisher::ServeReplay() {
  while (true) {
    zmq_pollitem_t item = {replay_, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, 0) <= 0 || (item.revents & ZMQ_POLLIN) == 0) return;
    // [identity, "", start seq]: what a REQ socket's request looks like here.
    std::vector<std::string> frames;
    int more = 1;
    while (more) {
      zmq_msg_t message;
      zmq_msg_init(&message);
      if (zmq_msg_recv(&message, replay_, 0) < 0) {
        zmq_msg_close(&message);
        return;
      }
      frames.emplace_back(static_cast<const char*>(zmq_msg_data(&message)),
                          zmq_msg_size(&message));
      zmq_msg_close(&message);
      size_t size = sizeof(more);
      zmq_getsockopt(replay_, ZMQ_RCVMORE, &more, &size);
    }
    if (frames.size() != 3 || frames[2].size() != 8) {
      LOG(WARNING) << "KV events: ignoring a malformed replay request of " << frames.size()
                   << " frames";
      continue;
    }
    uint64_t start = 0;
    for (unsigned char byte : frames[2]) start = (start << 8) | byte;
    const std::string empty;
    for (const auto& [seq, payload] : replay_buffer_) {
      if (seq < start) continue;
      const std::string seq_bytes = SeqBytes(static_cast<int64_t>(seq));
      SendMultipart(replay_, {&frames[0], &empty, &seq_bytes, &payload});
    }
    const std::string end = SeqBytes(-1);
    SendMultipart(replay_, {&frames[0], &empty, &end, &empty});
  }
}

}  // namespace pagoda::scheduler
