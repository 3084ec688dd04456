// The HTTP server's insides, shared by its files: what every connection
// shares (HttpServerCore: options, routes, loops, budgets, metrics) and
// one connection (HttpSession). Internal to http_server.cc and
// http_session.cc; the rest of the code base uses http_server.h.
#ifndef PAGODA_SCHEDULER_API_HTTP_SESSION_H_
#define PAGODA_SCHEDULER_API_HTTP_SESSION_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "boost/asio/any_io_executor.hpp"
#include "boost/asio/dispatch.hpp"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/strand.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http/parser.hpp"
#include "boost/beast/http/string_body.hpp"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "scheduler/api/background_lane.h"
#include "scheduler/api/chat_renderer.h"
#include "scheduler/api/http_exchange.h"
#include "scheduler/api/http_server_options.h"
#include "scheduler/api/openai_routes.h"
#include "scheduler/api/request_path.h"

namespace pagoda::scheduler {
namespace http_server_internal {

// The kernel caps the backlog at net.core.somaxconn (4096 on current
// kernels); bursts of new clients wait there instead of being reset.
inline constexpr int kListenBacklog = 4096;
// Most bytes one read takes from a socket: small while headers are read
// (what an idle or drip-feeding connection holds), larger for a body.
inline constexpr size_t kHeaderReadBytes = 4 << 10;
inline constexpr size_t kBodyReadBytes = 64 << 10;
// Bytes a connection reads ahead while its request is being answered (the
// next pipelined request, or the end of the connection it watches for).
inline constexpr size_t kReadAheadBytes = 64 << 10;
// A buffer grown past this by a large request is given back once it is done.
inline constexpr size_t kKeptBufferBytes = 64 << 10;
// How long a refused request's remaining bytes are read and dropped.
inline constexpr absl::Duration kLingerTime = absl::Seconds(2);
// How long deferred work (streams' later events) holds an io thread before
// what waits in the loop's queue runs: a few events' worth (each tens of
// microseconds), small beside a step's TTFT.
inline constexpr std::chrono::microseconds kBackgroundSlice(200);

inline std::chrono::steady_clock::duration ToChrono(absl::Duration duration) {
  return absl::ToChronoNanoseconds(duration);
}

}  // namespace http_server_internal

// What every connection shares: options, routes, the connection count and
// registry (for Shutdown), the body-bytes budget, metrics.
class HttpServerCore {
 public:
  HttpServerCore(HttpServerOptions options, RequestPath* path, ChatRenderer chat)
      : options(std::move(options)),
        routes(std::make_unique<OpenAiRoutes>(this->options, path, std::move(chat))),
        keep_io_running(boost::asio::make_work_guard(io)),
        background(io, this->options.io_threads, http_server_internal::kBackgroundSlice),
        acceptor(boost::asio::make_strand(control_io)) {
    if (this->options.metrics_registry != nullptr) {
      requests_family = &prometheus::BuildCounter()
                             .Name("pagoda_http_requests_total")
                             .Help("HTTP requests answered, by route and status")
                             .Register(*this->options.metrics_registry);
      duration_family = &prometheus::BuildHistogram()
                             .Name("pagoda_http_request_duration_seconds")
                             .Help("HTTP request time, headers read to response written")
                             .Register(*this->options.metrics_registry);
    }
  }

  void Accept();
  void Record(absl::string_view path, int status, absl::Duration elapsed);
  // Reserves `bytes` more of the body budget; false (nothing reserved) if
  // that would go past it.
  bool ReserveBody(size_t bytes) {
    size_t held = body_bytes.load();
    do {
      if (held + bytes > options.max_body_bytes_in_flight) return false;
    } while (!body_bytes.compare_exchange_weak(held, held + bytes));
    return true;
  }
  void ReleaseBody(size_t bytes) { body_bytes.fetch_sub(bytes); }

  const HttpServerOptions options;
  // Outlives the loop: handlers the loop still holds when it is destroyed
  // (sessions, their calls) reach the routes' call tracker.
  std::unique_ptr<OpenAiRoutes> routes;
  std::vector<std::thread> threads;
  int port = 0;
  std::atomic<int> connections{0};
  std::atomic<size_t> body_bytes{0};
  std::atomic<bool> stopping{false};
  bool shut_down = false;  // Shutdown() has run (Shutdown's caller only).

  absl::Mutex sessions_mu;
  uint64_t next_session_id ABSL_GUARDED_BY(sessions_mu) = 0;
  // Weak: a session lives by its pending operations; this only lets
  // Shutdown reach those still open.
  absl::flat_hash_map<uint64_t, std::weak_ptr<class HttpSession>> sessions
      ABSL_GUARDED_BY(sessions_mu);

  prometheus::Family<prometheus::Counter>* requests_family = nullptr;
  prometheus::Family<prometheus::Histogram>* duration_family = nullptr;
  absl::Mutex metrics_mu;
  absl::flat_hash_map<std::string, prometheus::Histogram*> durations ABSL_GUARDED_BY(metrics_mu);
  absl::flat_hash_map<std::pair<std::string, int>, prometheus::Counter*> counters
      ABSL_GUARDED_BY(metrics_mu);

  // Last, so destroyed first: sessions freed with the loops' handlers still
  // count themselves out of `connections` and `body_bytes` above.
  // The loop of the requests that take their time (completions, tokenizing)
  // and of their connections: io_threads threads.
  boost::asio::io_context io;
  // Runs while it has no connection yet.
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> keep_io_running;
  // Streams' later events (HttpExchange::background); after `io`, so
  // destroyed before it, with the work it still holds.
  BackgroundLane background;
  // The control loop, on a thread of its own: accepts, reads every new
  // connection's requests and answers those answered at once (/health,
  // /version, /v1/models, refusals); a connection whose request goes to the
  // engine moves to `io` (HttpSession::MoveToIo). Under a load of streams
  // `io`'s queue holds every stream's pending events, which a health check
  // would otherwise wait behind; this loop stays nearly idle, so its thread
  // is woken at once.
  boost::asio::io_context control_io;
  boost::asio::ip::tcp::acceptor acceptor;  // On a strand: accepts and the close never overlap.
};

// One client connection: reads requests one at a time (Beast's parser, with
// every limit and deadline of HttpServerOptions), hands them to the routes
// and writes their responses. Everything runs on the connection's strand.
class HttpSession : public HttpExchange, public std::enable_shared_from_this<HttpSession> {
 public:
  // `on_control`: the socket's executor is a strand of the control loop.
  HttpSession(HttpServerCore* core, boost::asio::ip::tcp::socket socket, uint64_t id,
              bool on_control)
      : core_(core),
        socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        buffer_(core->options.max_header_bytes + http_server_internal::kReadAheadBytes),
        id_(id),
        on_control_(on_control) {}
  ~HttpSession() override {
    ReleaseBody();
    if (!moved_) core_->connections.fetch_sub(1);  // Else its successor counts it.
  }

  void Begin() {
    boost::beast::error_code ignored;
    // Nagle would hold each response's tail.
    socket_.set_option(boost::asio::ip::tcp::no_delay(true), ignored);
    // Reads and writes are first tried at once (ReadNow, Flush); only what
    // would block goes through the loop.
    socket_.non_blocking(true, ignored);
    if (core_->options.socket_send_buffer_bytes > 0) {
      socket_.set_option(
          boost::asio::socket_base::send_buffer_size(core_->options.socket_send_buffer_bytes),
          ignored);
    }
    ReadRequest();
  }
  // Closes the connection (from Shutdown): on the strand.
  void CloseSoon() {
    boost::asio::dispatch(socket_.get_executor(), [self = shared_from_this()] { self->Close(); });
  }

  // HttpExchange.
  boost::asio::any_io_executor executor() override { return socket_.get_executor(); }
  void Attach(std::shared_ptr<HttpCall> call) override { call_ = std::move(call); }
  void Respond(int status, absl::string_view content_type, std::string body) override;
  void StartEventStream() override;
  bool SendEvent(absl::string_view data) override;
  void EndEventStream() override;
  void HoldWrites() override { hold_writes_ = true; }
  void ReleaseWrites() override {
    hold_writes_ = false;
    Flush();
  }
  BackgroundLane& background() override { return core_->background; }

 private:
  enum class Phase { kIdle, kHeader, kBody, kHandling, kDone };

  void ReadRequest();
  // Reads what the socket holds now, without waiting; false if nothing.
  bool ReadNow();
  void ReadHeader();
  // Parses the headers from the buffer, reading more while they are
  // incomplete. A request that has arrived whole is parsed and answered
  // without a trip through the loop (which, under a load of streams, is a
  // wait behind every stream's pending events).
  void ParseHeader();
  void OnHeader(boost::beast::error_code error);
  // Reads up to `most` more bytes into the buffer, then calls next(*this, error), unless
  // the exchange was refused meanwhile (the bytes are then discarded).
  template <typename Next>
  void ReadMore(size_t most, Next next);
  // Answers "Expect: 100-continue", then reads the body.
  void ContinueThenReadBody();
  void ReadBody();
  void OnBody(boost::beast::error_code error);
  void Dispatch();
  // Hands the connection, with `request` read from it, to a new session on
  // the io loop, which answers it (Resume). This one is then done.
  void MoveToIo(HttpRequest request);
  void Resume(HttpRequest request);
  // Keeps one read pending while a request is answered: the client leaving
  // (EOF, reset) is seen at once; bytes it sends (a pipelined request) wait
  // in the buffer, up to kReadAheadBytes.
  void ReadAhead();
  void OnReadAhead(boost::beast::error_code error, size_t bytes);
  // A response to a request whose body may be unread: sent, then closed.
  void RefuseAndClose(int status, const std::string& message);
  void Send(std::string bytes);
  void Flush();
  void OnWritten(boost::beast::error_code error);
  void EndExchange();
  void SetDeadline(absl::Duration timeout);
  void ClearDeadline() { timer_.cancel(); }
  void OnDeadline();
  void Close();
  // After a refusal whose request may still be arriving: stop sending, then
  // read and discard what comes for a short while before closing, so that
  // the client reads the refusal instead of a reset (the kernel resets a
  // connection closed with unread bytes).
  void LingerThenClose();
  void Discard();
  void ReleaseBody() {
    if (body_reserved_ > 0) core_->ReleaseBody(body_reserved_);
    body_reserved_ = 0;
  }
  std::string Head(int status, absl::string_view content_type, size_t length, bool chunked);

  HttpServerCore* const core_;
  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  boost::beast::flat_buffer buffer_;
  const uint64_t id_;
  const bool on_control_;
  bool moved_ = false;  // MoveToIo handed the connection on.
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  Phase phase_ = Phase::kIdle;
  bool closed_ = false;
  bool reading_ = false;        // A read (any kind) is pending.
  bool writing_ = false;        // A write is pending.
  bool hold_writes_ = false;    // HoldWrites: queue, do not write yet.
  bool close_after_ = false;    // Close once the response is written.
  bool keep_alive_ = true;      // This request's client keeps the connection.
  bool streaming_ = false;      // An event stream is open.
  bool response_done_ = false;  // The exchange's last bytes are queued.
  size_t body_reserved_ = 0;    // Of core_->body_bytes.
  std::string pending_;         // Queued for the next write.
  std::string writing_bytes_;   // The write in flight.
  std::shared_ptr<HttpCall> call_;
  std::string route_;  // Metrics label of the request being answered.
  int status_ = 0;     // Its status.
  absl::Time started_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_HTTP_SESSION_H_
