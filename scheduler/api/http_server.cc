#include "scheduler/api/http_server.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "boost/asio/bind_executor.hpp"
#include "boost/asio/dispatch.hpp"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/strand.hpp"
#include "boost/asio/write.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/core/read_size.hpp"
#include "boost/beast/http/error.hpp"
#include "boost/beast/http/parser.hpp"
#include "boost/beast/http/string_body.hpp"
#include "glog/logging.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "scheduler/api/background_lane.h"
#include "scheduler/api/http_exchange.h"
#include "scheduler/api/http_request_head.h"
#include "scheduler/api/openai_routes.h"
#include "scheduler/api/request_duration_buckets.h"

namespace pagoda::scheduler {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

// The kernel caps the backlog at net.core.somaxconn (4096 on current
// kernels); bursts of new clients wait there instead of being reset.
constexpr int kListenBacklog = 4096;
// Most bytes one read takes from a socket: small while headers are read
// (what an idle or drip-feeding connection holds), larger for a body.
constexpr size_t kHeaderReadBytes = 4 << 10;
constexpr size_t kBodyReadBytes = 64 << 10;
// Bytes a connection reads ahead while its request is being answered (the
// next pipelined request, or the end of the connection it watches for).
constexpr size_t kReadAheadBytes = 64 << 10;
// A buffer grown past this by a large request is given back once it is done.
constexpr size_t kKeptBufferBytes = 64 << 10;
// How long a refused request's remaining bytes are read and dropped.
constexpr absl::Duration kLingerTime = absl::Seconds(2);
// How long deferred work (streams' later events) holds an io thread before
// what waits in the loop's queue runs: a few events' worth (each tens of
// microseconds), small beside a step's TTFT.
constexpr std::chrono::microseconds kBackgroundSlice(200);

std::chrono::steady_clock::duration ToChrono(absl::Duration duration) {
  return absl::ToChronoNanoseconds(duration);
}

absl::string_view Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 413:
      return "Payload Too Large";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 499:
      return "Client Closed Request";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Unknown";
  }
}

}  // namespace

absl::Status CheckHttpIoThreads(int io_threads) {
  if (io_threads >= 1 && io_threads <= kMaxHttpIoThreads) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("HTTP io threads must be in [1, ", kMaxHttpIoThreads, "], got ", io_threads));
}

// What every connection shares: options, routes, the connection count and
// registry (for Shutdown), the body-bytes budget, metrics.
class HttpServer::Core {
 public:
  Core(HttpServerOptions options, Engine* engine, RequestValidator* validator,
       const Tokenizer* tokenizer, ChatRenderer chat)
      : options(std::move(options)),
        routes(std::make_unique<OpenAiRoutes>(this->options, engine, validator, tokenizer,
                                              std::move(chat))),
        keep_io_running(asio::make_work_guard(io)),
        background(io, this->options.io_threads, kBackgroundSlice),
        acceptor(asio::make_strand(control_io)) {
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
  asio::io_context io;
  // Runs while it has no connection yet.
  asio::executor_work_guard<asio::io_context::executor_type> keep_io_running;
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
  asio::io_context control_io;
  tcp::acceptor acceptor;  // On a strand: accepts and the close never overlap.
};

// One client connection: reads requests one at a time (Beast's parser, with
// every limit and deadline of HttpServerOptions), hands them to the routes
// and writes their responses. Everything runs on the connection's strand.
class HttpSession : public HttpExchange, public std::enable_shared_from_this<HttpSession> {
 public:
  // `on_control`: the socket's executor is a strand of the control loop.
  HttpSession(HttpServer::Core* core, tcp::socket socket, uint64_t id, bool on_control)
      : core_(core),
        socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        buffer_(core->options.max_header_bytes + kReadAheadBytes),
        id_(id),
        on_control_(on_control) {}
  ~HttpSession() override {
    ReleaseBody();
    if (!moved_) core_->connections.fetch_sub(1);  // Else its successor counts it.
  }

  void Begin() {
    beast::error_code ignored;
    socket_.set_option(tcp::no_delay(true), ignored);  // Nagle would hold each response's tail.
    // Reads and writes are first tried at once (ReadNow, Flush); only what
    // would block goes through the loop.
    socket_.non_blocking(true, ignored);
    if (core_->options.socket_send_buffer_bytes > 0) {
      socket_.set_option(
          asio::socket_base::send_buffer_size(core_->options.socket_send_buffer_bytes), ignored);
    }
    ReadRequest();
  }
  // Closes the connection (from Shutdown): on the strand.
  void CloseSoon() {
    asio::dispatch(socket_.get_executor(), [self = shared_from_this()] { self->Close(); });
  }

  // HttpExchange.
  asio::any_io_executor executor() override { return socket_.get_executor(); }
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
  void OnHeader(beast::error_code error);
  // Reads up to `most` more bytes into the buffer, then calls next(*this, error), unless
  // the exchange was refused meanwhile (the bytes are then discarded).
  template <typename Next>
  void ReadMore(size_t most, Next next);
  // Answers "Expect: 100-continue", then reads the body.
  void ContinueThenReadBody();
  void ReadBody();
  void OnBody(beast::error_code error);
  void Dispatch();
  // Hands the connection, with `request` read from it, to a new session on
  // the io loop, which answers it (Resume). This one is then done.
  void MoveToIo(HttpRequest request);
  void Resume(HttpRequest request);
  // Keeps one read pending while a request is answered: the client leaving
  // (EOF, reset) is seen at once; bytes it sends (a pipelined request) wait
  // in the buffer, up to kReadAheadBytes.
  void ReadAhead();
  void OnReadAhead(beast::error_code error, size_t bytes);
  // A response to a request whose body may be unread: sent, then closed.
  void RefuseAndClose(int status, const std::string& message);
  void Send(std::string bytes);
  void Flush();
  void OnWritten(beast::error_code error);
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

  HttpServer::Core* const core_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  beast::flat_buffer buffer_;
  const uint64_t id_;
  const bool on_control_;
  bool moved_ = false;  // MoveToIo handed the connection on.
  std::optional<http::request_parser<http::string_body>> parser_;
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

void HttpServer::Core::Record(absl::string_view path, int status, absl::Duration elapsed) {
  if (requests_family == nullptr) return;
  prometheus::Counter* counter;
  prometheus::Histogram* histogram;
  {
    absl::MutexLock lock(&metrics_mu);
    const std::pair<std::string, int> key(path, status);
    auto found = counters.find(key);
    if (found == counters.end()) {
      found = counters
                  .emplace(key, &requests_family->Add({{"path", std::string(path)},
                                                       {"status", absl::StrCat(status)}}))
                  .first;
    }
    counter = found->second;
    auto duration = durations.find(std::string(path));
    if (duration == durations.end()) {
      duration =
          durations
              .emplace(std::string(path), &duration_family->Add({{"path", std::string(path)}},
                                                                RequestDurationBucketsSeconds()))
              .first;
    }
    histogram = duration->second;
  }
  counter->Increment();
  histogram->Observe(absl::ToDoubleSeconds(elapsed));
}

void HttpServer::Core::Accept() {
  acceptor.async_accept(asio::make_strand(control_io), [this](beast::error_code error,
                                                              tcp::socket socket) {
    if (stopping.load()) return;
    if (error) {
      // Out of descriptors (EMFILE) and the like: retry shortly, without
      // spinning; the client waits in the backlog.
      LOG_EVERY_N(WARNING, 100) << "HTTP accept: " << error.message();
      auto timer = std::make_shared<asio::steady_timer>(control_io, std::chrono::milliseconds(50));
      timer->async_wait([this, timer](beast::error_code) {
        if (!stopping.load()) Accept();
      });
      return;
    }
    if (connections.fetch_add(1) >= options.max_connections) {
      connections.fetch_sub(1);
      // Refused at once: one non-blocking try at a 503, then closed.
      static const std::string kRefusal = [] {
        const std::string body = HttpErrorBody(503, "too many connections; retry later");
        return absl::StrCat(
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: "
            "application/json\r\nRetry-After: 1\r\nContent-Length: ",
            body.size(), "\r\nConnection: close\r\n\r\n", body);
      }();
      beast::error_code ignored;
      socket.non_blocking(true, ignored);
      socket.write_some(asio::buffer(kRefusal), ignored);
      socket.shutdown(tcp::socket::shutdown_both, ignored);
      socket.close(ignored);
    } else {
      std::shared_ptr<HttpSession> session;
      {
        absl::MutexLock lock(&sessions_mu);
        const uint64_t id = next_session_id++;
        session = std::make_shared<HttpSession>(this, std::move(socket), id, /*on_control=*/true);
        sessions.emplace(id, session);
      }
      asio::dispatch(session->executor(), [session] { session->Begin(); });
    }
    Accept();
  });
}

void HttpSession::SetDeadline(absl::Duration timeout) {
  timer_.expires_after(ToChrono(timeout));
  timer_.async_wait([self = shared_from_this()](beast::error_code error) {
    if (!error) self->OnDeadline();
  });
}

void HttpSession::OnDeadline() {
  if (closed_) return;
  switch (phase_) {
    case Phase::kHeader:
    case Phase::kBody:
      if (!writing_) return RefuseAndClose(408, "request not received in time");
      break;
    case Phase::kDone:  // Lingered long enough.
    default:
      break;
  }
  // Idle past the keep-alive time, or a write the client did not take.
  Close();
}

void HttpSession::ReadRequest() {
  if (closed_) return;
  phase_ = Phase::kIdle;
  route_.clear();
  status_ = 0;
  // Draining, a connection stays open for its next request, which gets 503
  // and Connection: close; Shutdown closes those left.
  if (core_->stopping.load()) return Close();
  // Give back what a large request grew the buffer to.
  if (buffer_.capacity() > kKeptBufferBytes && buffer_.size() < kKeptBufferBytes) {
    beast::flat_buffer fresh(core_->options.max_header_bytes + kReadAheadBytes);
    fresh.commit(asio::buffer_copy(fresh.prepare(buffer_.size()), buffer_.data()));
    buffer_ = std::move(fresh);
  }
  if (buffer_.size() > 0) return ReadHeader();
  if (reading_) {  // A read-ahead is pending: it is the idle wait.
    SetDeadline(core_->options.idle_timeout);
    return;
  }
  // A new connection's first request is usually here by now.
  if (ReadNow()) return ReadHeader();
  // Wait for the first byte of the next request under the idle deadline,
  // then for the rest of the headers under the header deadline.
  SetDeadline(core_->options.idle_timeout);
  ReadAhead();
}

bool HttpSession::ReadNow() {
  const size_t room = beast::read_size(buffer_, kHeaderReadBytes);
  if (room == 0) return false;
  beast::error_code error;  // would_block when nothing is there.
  const size_t bytes = socket_.read_some(buffer_.prepare(room), error);
  if (error || bytes == 0) return false;  // A failure shows again on the next (async) read.
  buffer_.commit(bytes);
  return true;
}

template <typename Next>
void HttpSession::ReadMore(size_t most, Next next) {
  // What the buffer has room for already (at least 512 bytes), as Beast's
  // own reads: an idle or drip-feeding connection holds little.
  const size_t room = beast::read_size(buffer_, most);
  if (room == 0) return next(*this, beast::error_code(http::error::buffer_overflow));
  reading_ = true;
  socket_.async_read_some(buffer_.prepare(room),
                          [self = shared_from_this(), next](beast::error_code error, size_t bytes) {
                            self->reading_ = false;
                            if (self->closed_) return;
                            if (self->phase_ == Phase::kDone)
                              return error ? self->Close() : self->Discard();
                            self->buffer_.commit(bytes);
                            next(*self, error);
                          });
}

void HttpSession::ReadHeader() {
  phase_ = Phase::kHeader;
  started_ = absl::Now();
  parser_.emplace();
  LimitRequestParser(core_->options, *parser_);
  SetDeadline(core_->options.header_timeout);
  ParseHeader();
}

void HttpSession::ParseHeader() {
  beast::error_code error;
  if (buffer_.size() > 0) {
    // Stops at the end of the headers (the parser is not eager); consumes
    // nothing until they are complete.
    buffer_.consume(parser_->put(buffer_.data(), error));
    if (error == http::error::need_more) error = {};
  }
  if (error || parser_->is_header_done()) return OnHeader(error);
  ReadMore(kHeaderReadBytes, [](HttpSession& self, beast::error_code read_error) {
    read_error ? self.OnHeader(read_error) : self.ParseHeader();
  });
}

void HttpSession::OnHeader(beast::error_code error) {
  if (closed_) return;
  if (phase_ == Phase::kDone) return error ? Close() : Discard();
  RequestDecision decision = DecideOnHead(core_->options, error, *parser_);
  route_ = std::move(decision.route);
  if (decision.action == RequestDecision::Action::kClose) return Close();
  if (decision.action == RequestDecision::Action::kRefuse) {
    return RefuseAndClose(decision.status, decision.message);
  }
  const auto& header = parser_->get();
  keep_alive_ = header.keep_alive();
  if (const auto length = parser_->content_length(); length.has_value()) {
    if (!core_->ReserveBody(*length)) {
      return RefuseAndClose(503, "the server holds too many request bodies; retry later");
    }
    body_reserved_ = *length;
  }
  if (parser_->is_done()) return Dispatch();
  phase_ = Phase::kBody;
  parser_->eager(true);  // The body: as much as the buffer holds at each put.
  SetDeadline(core_->options.body_timeout);
  const auto expect = header[http::field::expect];
  if (absl::EqualsIgnoreCase(absl::string_view(expect.data(), expect.size()), "100-continue")) {
    return ContinueThenReadBody();
  }
  ReadBody();
}

void HttpSession::ContinueThenReadBody() {
  // curl sends large bodies only after this (or a 1 s wait).
  writing_ = true;
  static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
  asio::async_write(socket_, asio::buffer(kContinue),
                    [self = shared_from_this()](beast::error_code error, size_t) {
                      self->writing_ = false;
                      if (error) return self->Close();
                      self->ReadBody();
                    });
}

void HttpSession::ReadBody() {
  if (closed_) return;
  // Piece by piece, so that a chunked body (length unknown in advance) is
  // counted against the budget (OnBody) as it grows.
  beast::error_code error;
  bool progressed = false;
  while (buffer_.size() > 0 && !parser_->is_done()) {
    const size_t used = parser_->put(buffer_.data(), error);
    buffer_.consume(used);
    progressed |= used > 0;
    if (error || used == 0) break;
  }
  if (error == http::error::need_more) error = {};
  if (error || progressed || parser_->is_done()) return OnBody(error);
  ReadMore(kBodyReadBytes, [](HttpSession& self, beast::error_code read_error) {
    read_error ? self.OnBody(read_error) : self.ReadBody();
  });
}

void HttpSession::OnBody(beast::error_code error) {
  if (closed_) return;
  if (phase_ == Phase::kDone) return error ? Close() : Discard();
  if (error == http::error::need_buffer) error = {};
  if (error) {
    const RequestDecision decision = DecideOnBodyError(core_->options, error);
    if (decision.action == RequestDecision::Action::kRefuse) {
      return RefuseAndClose(decision.status, decision.message);
    }
    return Close();
  }
  const size_t held = parser_->get().body().capacity();
  if (held > body_reserved_) {
    if (!core_->ReserveBody(held - body_reserved_)) {
      return RefuseAndClose(503, "the server holds too many request bodies; retry later");
    }
    body_reserved_ = held;
  }
  if (!parser_->is_done()) return ReadBody();
  Dispatch();
}

void HttpSession::Dispatch() {
  phase_ = Phase::kHandling;
  ClearDeadline();
  HttpRequest request = ToHttpRequest(parser_->release());
  parser_.reset();
  // The body's budget goes with it: a request waiting for the tokenizer
  // pool still holds its body.
  if (body_reserved_ > 0) {
    request.budget = std::shared_ptr<void>(
        nullptr, [core = core_, bytes = body_reserved_](void*) { core->ReleaseBody(bytes); });
    body_reserved_ = 0;
  }
  // (Only with nothing pending on the socket; there never is here, the
  // request having just been read whole: were there, it is answered here.)
  if (on_control_ && !reading_ && !writing_ && !OpenAiRoutes::AnsweredAtOnce(route_)) {
    return MoveToIo(std::move(request));
  }
  ReadAhead();
  core_->routes->Handle(std::move(request), shared_from_this());
}

void HttpSession::MoveToIo(HttpRequest request) {
  // No operation is pending on the socket (Dispatch checked), so it can
  // leave this loop's reactor.
  beast::error_code error;
  const tcp::endpoint local = socket_.local_endpoint(error);
  const tcp::socket::native_handle_type descriptor = error ? -1 : socket_.release(error);
  if (error) {
    if (descriptor >= 0) ::close(descriptor);
    return Close();
  }
  tcp::socket moved(asio::make_strand(core_->io), local.protocol(), descriptor);
  auto next = std::make_shared<HttpSession>(core_, std::move(moved), id_, /*on_control=*/false);
  next->buffer_ = std::move(buffer_);  // Bytes the client sent past the request.
  next->route_ = route_;
  next->started_ = started_;
  next->keep_alive_ = keep_alive_;
  moved_ = true;
  closed_ = true;  // Late handlers (the cancelled deadline) find nothing to do.
  {
    absl::MutexLock lock(&core_->sessions_mu);
    core_->sessions[id_] = next;
  }
  asio::dispatch(next->executor(), [next, request = std::move(request)]() mutable {
    next->Resume(std::move(request));
  });
}

void HttpSession::Resume(HttpRequest request) {
  beast::error_code ignored;
  socket_.non_blocking(true, ignored);  // TCP_NODELAY went with the descriptor.
  phase_ = Phase::kHandling;
  if (core_->stopping.load()) return Close();
  ReadAhead();
  core_->routes->Handle(std::move(request), shared_from_this());
}

void HttpSession::ReadAhead() {
  if (closed_ || reading_) return;
  const size_t room = buffer_.max_size() - buffer_.size();
  if (room == 0 || buffer_.size() >= kReadAheadBytes) return;  // Enough waiting; stop watching.
  reading_ = true;
  socket_.async_read_some(buffer_.prepare(std::min<size_t>(room, 4096)),
                          [self = shared_from_this()](beast::error_code error, size_t bytes) {
                            self->reading_ = false;
                            self->OnReadAhead(error, bytes);
                          });
}

void HttpSession::OnReadAhead(beast::error_code error, size_t bytes) {
  if (closed_) return;
  if (error == asio::error::operation_aborted && phase_ == Phase::kIdle) {
    return ReadRequest();  // Cancelled to read a pipelined request.
  }
  if (error) return Close();  // The client left (or reset): abort its request.
  if (phase_ == Phase::kDone) return Discard();
  buffer_.commit(bytes);
  if (phase_ == Phase::kIdle) return ReadHeader();
  ReadAhead();
}

std::string HttpSession::Head(int status, absl::string_view content_type, size_t length,
                              bool chunked) {
  std::string head = absl::StrCat("HTTP/1.1 ", status, " ", Reason(status), "\r\n");
  if (!content_type.empty()) absl::StrAppend(&head, "Content-Type: ", content_type, "\r\n");
  // A full queue or a busy server: clients (OpenAI's SDK, vLLM's benchmark)
  // back off by this many seconds.
  if (status == 429 || status == 503) absl::StrAppend(&head, "Retry-After: 1\r\n");
  if (chunked) {
    absl::StrAppend(&head, "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n");
  } else {
    absl::StrAppend(&head, "Content-Length: ", length, "\r\n");
  }
  const bool keep = keep_alive_ && !close_after_ && !core_->routes->draining();
  if (!keep) close_after_ = true;
  absl::StrAppend(&head, keep ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n");
  return head;
}

void HttpSession::RefuseAndClose(int status, const std::string& message) {
  if (closed_ || response_done_ || streaming_) return Close();
  phase_ = Phase::kDone;
  close_after_ = true;
  if (route_.empty()) route_ = "other";
  Respond(status, "application/json", HttpErrorBody(status, message));
}

void HttpSession::Respond(int status, absl::string_view content_type, std::string body) {
  if (closed_ || response_done_ || streaming_) return;
  status_ = status;
  response_done_ = true;
  // Head and body leave in one write (with TCP_NODELAY: one segment for a
  // small response, no wait for the client's delayed ACK).
  std::string bytes =
      Head(status, body.empty() && status == 200 ? "" : content_type, body.size(), false);
  bytes += body;
  Send(std::move(bytes));
}

void HttpSession::StartEventStream() {
  if (closed_ || response_done_ || streaming_) return;
  status_ = 200;
  streaming_ = true;
  Send(Head(200, "text/event-stream", 0, true));
}

bool HttpSession::SendEvent(absl::string_view data) {
  if (closed_ || !streaming_ || response_done_) return false;
  if (data.empty()) return true;
  if (pending_.size() + writing_bytes_.size() + data.size() >
      core_->options.max_stream_buffer_bytes) {
    LOG_EVERY_N(WARNING, 100) << "HTTP: dropping a stream whose client stopped reading";
    Close();
    return false;
  }
  absl::StrAppend(&pending_, absl::Hex(data.size()), "\r\n", data, "\r\n");
  if (!hold_writes_) Flush();
  return true;
}

void HttpSession::EndEventStream() {
  if (closed_ || !streaming_ || response_done_) return;
  response_done_ = true;
  Send("0\r\n\r\n");
}

void HttpSession::Send(std::string bytes) {
  pending_ += bytes;
  if (!hold_writes_) Flush();
}

void HttpSession::Flush() {
  if (closed_ || writing_ || pending_.empty()) {
    if (!closed_ && !writing_ && response_done_) EndExchange();
    return;
  }
  // Written at once while the kernel takes it: a stream's event costs no
  // trip through the loop (nor a deadline to set and cancel).
  beast::error_code error;
  const size_t sent = socket_.write_some(asio::buffer(pending_), error);
  if (error && error != asio::error::would_block && error != asio::error::try_again) {
    return Close();
  }
  pending_.erase(0, error ? 0 : sent);
  if (pending_.empty()) {
    // The end of an exchange goes on from the loop, not from this stack: a
    // pipelined request already read would otherwise be answered in it, and
    // so on without bound.
    if (response_done_) {
      writing_ = true;
      asio::post(socket_.get_executor(), [self = shared_from_this()] {
        self->writing_ = false;
        self->OnWritten({});
      });
    }
    return;
  }
  // The client is not reading fast enough: the rest waits for it, under the
  // write deadline.
  writing_bytes_.swap(pending_);
  pending_.clear();
  writing_ = true;
  SetDeadline(core_->options.write_timeout);
  asio::async_write(socket_, asio::buffer(writing_bytes_),
                    [self = shared_from_this()](beast::error_code error, size_t) {
                      self->writing_ = false;
                      self->OnWritten(error);
                    });
}

void HttpSession::OnWritten(beast::error_code error) {
  if (closed_) return;
  if (error) return Close();
  writing_bytes_.clear();
  if (phase_ != Phase::kHeader && phase_ != Phase::kBody) ClearDeadline();
  Flush();
}

void HttpSession::EndExchange() {
  core_->Record(route_.empty() ? "other" : route_, status_, absl::Now() - started_);
  call_.reset();
  streaming_ = false;
  response_done_ = false;
  if (phase_ == Phase::kDone) return LingerThenClose();
  if (close_after_) return Close();
  phase_ = Phase::kIdle;
  // A read-ahead still pending while a pipelined request already waits in
  // the buffer: cancel it, so that the request is read now.
  if (reading_ && buffer_.size() > 0) {
    beast::error_code ignored;
    socket_.cancel(ignored);
    return;  // OnReadAhead(operation_aborted) reads the request.
  }
  ReadRequest();
}

void HttpSession::LingerThenClose() {
  beast::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
  phase_ = Phase::kDone;
  SetDeadline(kLingerTime);
  if (reading_) return;  // The pending read's handler goes on discarding.
  Discard();
}

void HttpSession::Discard() {
  if (closed_) return;
  buffer_.clear();
  reading_ = true;
  socket_.async_read_some(buffer_.prepare(std::min<size_t>(buffer_.max_size(), 16 << 10)),
                          [self = shared_from_this()](beast::error_code error, size_t) {
                            self->reading_ = false;
                            if (error) return self->Close();
                            self->Discard();
                          });
}

void HttpSession::Close() {
  if (closed_) return;
  closed_ = true;
  if (status_ == 0 && !route_.empty() && phase_ == Phase::kHandling) {
    core_->Record(route_, 499, absl::Now() - started_);
  }
  timer_.cancel();
  beast::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  ReleaseBody();
  if (call_ != nullptr) {
    std::shared_ptr<HttpCall> call = std::move(call_);
    if (!response_done_ || writing_) call->OnClientGone();
  }
  absl::MutexLock lock(&core_->sessions_mu);
  core_->sessions.erase(id_);
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(HttpServerOptions options,
                                                              Engine* engine,
                                                              RequestValidator* validator,
                                                              const Tokenizer* tokenizer,
                                                              ChatRenderer chat) {
  if (options.max_connections < 1) {
    return absl::InvalidArgumentError("HTTP: max_connections must be >= 1");
  }
  if (absl::Status threads = CheckHttpIoThreads(options.io_threads); !threads.ok()) {
    return threads;
  }
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->core_ =
      std::make_unique<Core>(std::move(options), engine, validator, tokenizer, std::move(chat));
  Core& core = *server->core_;
  const std::string where = absl::StrCat(core.options.host, ":", core.options.port);
  beast::error_code error;
  const auto address = asio::ip::make_address(core.options.host, error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP: cannot listen on ", where, ": not an IP address"));
  }
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(core.options.port));
  // SO_REUSEADDR (a restart need not wait out TIME_WAIT) but never
  // SO_REUSEPORT: a second server on a busy port must fail, not share it.
  core.acceptor.open(endpoint.protocol(), error);
  if (!error) core.acceptor.set_option(tcp::acceptor::reuse_address(true), error);
  if (!error) core.acceptor.bind(endpoint, error);
  if (!error) core.acceptor.listen(kListenBacklog, error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for HTTP on ", where, ": ", error.message()));
  }
  core.port = core.acceptor.local_endpoint().port();
  core.Accept();
  for (int i = 0; i < core.options.io_threads; ++i) {
    core.threads.emplace_back([&core] { core.io.run(); });
  }
  core.threads.emplace_back([&core] { core.control_io.run(); });
  return server;
}

HttpServer::~HttpServer() { Shutdown(); }

int HttpServer::port() const { return core_->port; }

void HttpServer::SetDraining() { core_->routes->SetDraining(); }

void HttpServer::Shutdown() {
  if (core_ == nullptr || core_->shut_down) return;
  core_->shut_down = true;
  // Responses in flight get `shutdown_grace` to reach their clients; new
  // requests meanwhile get 503 (the server is draining) and Connection:
  // close. Then every connection still open is closed: idle keep-alive
  // ones and clients that stopped reading.
  core_->routes->SetDraining();
  if (!core_->routes->calls().WaitUntilIdle(core_->options.shutdown_grace)) {
    LOG(WARNING) << "HTTP: closing connections whose responses are still being written";
  }
  core_->stopping = true;
  asio::post(core_->acceptor.get_executor(), [core = core_.get()] {
    beast::error_code ignored;
    core->acceptor.close(ignored);
  });
  std::vector<std::shared_ptr<HttpSession>> open;
  {
    absl::MutexLock lock(&core_->sessions_mu);
    for (const auto& [id, weak] : core_->sessions) {
      if (auto session = weak.lock()) open.push_back(std::move(session));
    }
  }
  for (const auto& session : open) session->CloseSoon();
  open.clear();
  // The closes run (each session goes once its last handler has), then the
  // loop stops.
  for (int i = 0; i < 200 && core_->connections.load() > 0; ++i)
    absl::SleepFor(absl::Milliseconds(5));
  core_->keep_io_running.reset();
  core_->io.stop();
  core_->control_io.stop();
  for (std::thread& thread : core_->threads) thread.join();
  core_->threads.clear();
  // Tokenizing work already accepted posts to the stopped loop, where it is
  // dropped with the loop; the pool must be gone before the loop is.
  core_->routes->StopPool();
}

}  // namespace pagoda::scheduler
