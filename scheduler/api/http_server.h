// The OpenAI HTTP front door's server: connections, loops and limits; the
// routes (openai_routes.h) answer what it reads.
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
#include "scheduler/api/chat_renderer.h"
#include "scheduler/api/http_server_options.h"
#include "scheduler/api/request_path.h"

namespace pagoda::scheduler {

class HttpServerCore;

// OpenAI-compatible HTTP/1.1 beside gRPC: POST /v1/completions and
// /v1/chat/completions (JSON or SSE streams), GET /v1/models[/{id}], vLLM's
// POST /tokenize and /detokenize, GET /health, /ping, /version. Requests take
// the one request path (request_path.h) as gRPC's do: the same validation
// and tokenizer pool, engine submission, stop strings, and abort when the
// client leaves (seen on the connection itself, streamed or not). Errors are OpenAI's JSON error
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
// templates, which grow with the prompt, run on the request path's pool, never
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
// Thread-safe. The request path must outlive the server.
class HttpServer {
 public:
  // `chat` may be empty (chat completions are then refused with a clear
  // 400). UNAVAILABLE, naming host and port, when the port cannot be bound
  // (in use: no SO_REUSEPORT, so a second server on a busy port fails here).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(HttpServerOptions options,
                                                           RequestPath* path, ChatRenderer chat);
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

 private:
  HttpServer() = default;
  std::unique_ptr<HttpServerCore> core_;  // http_session.h
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_HTTP_SERVER_H_
