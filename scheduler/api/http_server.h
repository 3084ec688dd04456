#ifndef PAGODA_SCHEDULER_API_HTTP_SERVER_H_
#define PAGODA_SCHEDULER_API_HTTP_SERVER_H_

// The OpenAI-compatible HTTP front door (Boost.Beast): its options and limits,
// the connections, and the server that owns the routes (openai_routes.h).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "scheduler/api/openai_protocol.h"
#include "scheduler/api/request_validation.h"
#include "scheduler/engine/engine.h"
#include "text/tokenizer.h"

namespace prometheus {
class Registry;
}

namespace pagoda::scheduler {

// Renders chat messages into a prompt (the model's chat template), with the
// request's tools (OpenAI's array, or null) and chat_template_kwargs (an
// object, or null).
using ChatRenderer = std::function<absl::StatusOr<std::string>(
    const std::vector<ChatMessage>& messages, bool add_generation_prompt,
    const nlohmann::ordered_json& tools, const nlohmann::ordered_json& variables)>;

// Most io threads (--http-io-threads): each does at most a core's work, so
// more than this only adds threads a typo could start by the thousand.
constexpr int kMaxHttpIoThreads = 64;
// OK for io_threads in [1, kMaxHttpIoThreads]; else INVALID_ARGUMENT saying so.
absl::Status CheckHttpIoThreads(int io_threads);

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0 = the OS picks one.
  std::string model_name;
  int max_model_len = 0;
  // When set, every /v1/ call needs "Authorization: Bearer <api_key>" (401
  // otherwise); /health, /ping, /version, /tokenize, /detokenize are exempt
  // (as in vLLM, whose key guards /v1 only).
  std::string api_key;
  // How /v1/chat/completions reads tool calls back under tool_choice
  // "auto": "hermes", "llama3_json" or "" (auto refused). Checked at start.
  std::string tool_call_parser;

  // Connections open at once; one more is answered 503 and closed at once.
  int max_connections = 4096;
  // Threads running the io loop (see HttpServer), 1..kMaxHttpIoThreads; the
  // control loop has one more.
  int io_threads = 2;
  // Threads that tokenize text prompts and render chat templates, and how
  // many such requests may wait for them (more get 429; pagoda-server makes
  // it --max-queued-requests, so the pool never refuses below the limit).
  int tokenizer_threads = 2;
  int max_pending_tokenizations = 256;

  size_t max_body_bytes = 4 << 20;     // Larger bodies get 413 as soon as they cross it.
  size_t max_header_bytes = 16 << 10;  // Request line and headers together; 431 above.
  int max_header_count = 100;          // Header fields; 431 above.
  // Body bytes held by every connection together while being read: a body
  // that would go past it gets 503, so that many slow large bodies cannot
  // exhaust memory (4 MiB each would be 4 GiB at 1,000 connections).
  size_t max_body_bytes_in_flight = 32 << 20;
  // A stream whose client stops reading may hold this many bytes waiting
  // (besides the kernel's socket buffer); past it the client is dropped and
  // its request aborted.
  size_t max_stream_buffer_bytes = 1 << 20;
  // SO_SNDBUF of each connection; 0 leaves the kernel's autotuning (which
  // may let a client that stops reading hold a few MiB of kernel memory
  // before max_stream_buffer_bytes is reached).
  int socket_send_buffer_bytes = 0;

  absl::Duration header_timeout = absl::Seconds(10);  // First byte to the end of the headers.
  absl::Duration body_timeout = absl::Seconds(30);    // End of the headers to the end of the body.
  absl::Duration idle_timeout = absl::Seconds(60);    // Keep-alive connection between requests.
  absl::Duration write_timeout = absl::Seconds(30);   // One write the client does not take.

  // On Shutdown, how long responses still being written (after the engine
  // drained) get before their connections are closed.
  absl::Duration shutdown_grace = absl::Seconds(5);

  // When set, pagoda_http_requests_total{path,status} and
  // pagoda_http_request_duration_seconds{path} are registered here.
  std::shared_ptr<prometheus::Registry> metrics_registry;
};

// OpenAI-compatible HTTP/1.1 beside gRPC: POST /v1/completions and
// /v1/chat/completions (JSON or SSE streams), GET /v1/models[/{id}], vLLM's
// POST /tokenize and /detokenize, GET /health, /ping, /version. Requests take
// the gRPC path: the same RequestValidator, engine submission
// (MakeEngineRequest), stop strings, and abort when the client leaves (seen
// on the connection itself, streamed or not). Errors are OpenAI's JSON error
// shape with the HTTP status as `code`.
//
// Event-driven on Boost.Asio, with Boost.Beast parsing requests (Debian's
// libboost-dev: well kept, header-only, and its parser bounds header and
// body sizes as bytes arrive, chunked bodies included). Each connection is
// a small state machine on its own strand: an idle keep-alive connection or
// a client drip-feeding headers costs a socket and a few KiB, not a thread,
// and every phase (idle, headers, body, each write) has its deadline.
//
// Two loops. A control loop on a thread of its own accepts, reads each new
// connection's requests and answers those that need neither the engine nor
// the tokenizer (/health, /ping, /version, /v1/models, every refusal); a
// connection whose request goes to the engine moves, socket and unread
// bytes, to the io loop (`io_threads` threads), which answers it and the
// connection's later requests. Under a load of streams the io loop's queue
// holds every stream's pending events, and a health check queued behind
// them waited hundreds of milliseconds on a busy host; the control loop is
// nearly idle, so the kernel wakes its thread at once. Reads, header
// parsing and writes are first tried at once, so a request that has arrived
// whole is answered without a trip through its loop's queue, and a stream's
// event costs one write call, not a queued completion.
//
// Why `io_threads` = 2 by default: the loop only parses, routes, turns
// engine deltas into JSON and writes, all in microseconds; a second thread
// keeps connections served while the other serializes a burst of chunks,
// and more would only contend on the strands' locks on a host whose cores
// the engine, gRPC and the tokenizer threads also need. Tokenizing and chat
// templates, which grow with the prompt, run on `tokenizer_threads`, never
// on a loop.
//
// The engine's sinks never do HTTP work: they post each delta to the
// connection's strand, where it is detokenized, serialized and written.
// A stream writes as tokens arrive; while a write waits for the client, new
// events gather (bounded by max_stream_buffer_bytes) into the next write.
// Only a request's first delivery (its first token) goes straight to the io
// loop's queue; later ones go through the loop's BackgroundLane, which
// yields to that queue every 200 us. The queue is first in, first out: with
// every stream's deliveries in it, a new request's read and then its first
// token each waited a round of all of them, and streamed TTFT over HTTP was
// twice gRPC's at 256 clients.
//
// Thread-safe. The engine, validator, tokenizer must outlive the server.
class HttpServer {
 public:
  // `tokenizer` may be null (token-id prompts only); `chat` may be empty
  // (chat completions are then refused with a clear 400). UNAVAILABLE,
  // naming host and port, when the port cannot be bound (in use: no
  // SO_REUSEPORT, so a second server on a busy port fails here).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(HttpServerOptions options,
                                                           Engine* engine,
                                                           RequestValidator* validator,
                                                           const Tokenizer* tokenizer,
                                                           ChatRenderer chat);
  ~HttpServer();  // Shutdown()s.
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  // /health answers 503 from now on; new completions get 503 too (the
  // engine, which stops accepting, says so); responses say Connection:
  // close. Requests in flight go on.
  void SetDraining();
  // Stops accepting, gives responses in flight `shutdown_grace` to be
  // written, closes every connection left (idle keep-alive ones included)
  // and joins the io threads. Call after the engine has drained or stopped,
  // so that every request has its outcome. Idempotent.
  void Shutdown();

  class Core;  // Opaque outside http_server.cc.

 private:
  HttpServer() = default;
  std::unique_ptr<Core> core_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_HTTP_SERVER_H_
