// The OpenAI HTTP server's options and limits: where it listens, what it
// serves, and every bound on connections, bytes and time. A header of its
// own so that the routes and the request-head rules read them without
// depending on the server that applies them.
#ifndef PAGODA_SCHEDULER_API_HTTP_SERVER_OPTIONS_H_
#define PAGODA_SCHEDULER_API_HTTP_SERVER_OPTIONS_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "scheduler/api/reasoning.h"

namespace prometheus {
class Registry;
}

namespace pagoda::scheduler {

// Most io threads (--http-io-threads): each does at most a core's work, so
// more than this only adds threads a typo could start by the thousand.
constexpr int kMaxHttpIoThreads = 64;
// OK for io_threads in [1, kMaxHttpIoThreads]; else INVALID_ARGUMENT saying so.
inline absl::Status CheckHttpIoThreads(int io_threads) {
  if (io_threads >= 1 && io_threads <= kMaxHttpIoThreads) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("HTTP io threads must be in [1, ", kMaxHttpIoThreads, "], got ", io_threads));
}

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0 = the OS picks one.
  std::string model_name;
  // Further names requests may give the model (vLLM's --served-model-name A
  // B): /v1/models lists each; responses still report model_name.
  std::vector<std::string> model_aliases;
  int max_model_len = 0;
  // When set, every /v1/ call needs "Authorization: Bearer <api_key>" (401
  // otherwise); /health, /ping, /version, /tokenize, /detokenize are exempt
  // (as in vLLM, whose key guards /v1 only). HttpServer::Start takes it
  // from the request path (RequestPathOptions), the one key of every door.
  std::string api_key;
  // How /v1/chat/completions reads tool calls back under tool_choice
  // "auto": "hermes", "llama3_json" or "" (auto refused). Checked at start.
  std::string tool_call_parser;
  // vLLM's --reasoning-parser: the think markers whose text chat answers
  // split into reasoning and content (reasoning.h); none: no split.
  std::optional<ReasoningMarkers> reasoning;
  // vLLM's --enable-prompt-tokens-details: usage.prompt_tokens_details.
  // cached_tokens in every final usage; --enable-force-include-usage: every
  // stream reports usage, in each chunk and a last usage chunk, as if it
  // asked with stream_options {"include_usage": true,
  // "continuous_usage_stats": true}.
  bool enable_prompt_tokens_details = false;
  bool enable_force_include_usage = false;
  // vLLM's --enable-server-load-tracking: GET /load answers the completions
  // and chat calls in flight (from their acceptance until their response
  // ends); without, 0.
  bool enable_server_load_tracking = false;
  // vLLM's --return-tokens-as-token-ids: logprobs name tokens "token_id:N"
  // unless a request's return_tokens_as_token_ids says otherwise.
  bool return_tokens_as_token_ids = false;
  // vLLM's --response-role: the role of chat answers to requests that add
  // the generation prompt (others answer in their last message's role).
  std::string response_role = "assistant";

  // Connections open at once; one more is answered 503 and closed at once.
  int max_connections = 4096;
  // Threads running the io loop (see HttpServer), 1..kMaxHttpIoThreads; the
  // control loop has one more.
  int io_threads = 2;
  // Tokenizing and chat templates run on the request path's pool
  // (RequestPathOptions), shared with the gRPC front doors.

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

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_HTTP_SERVER_OPTIONS_H_
