#include "scheduler/api/http_session.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "boost/asio/bind_executor.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/write.hpp"
#include "boost/beast/core/read_size.hpp"
#include "boost/beast/http/error.hpp"
#include "glog/logging.h"
#include "scheduler/api/http_request_head.h"

namespace pagoda::scheduler {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using http_server_internal::kBodyReadBytes;
using http_server_internal::kHeaderReadBytes;
using http_server_internal::kKeptBufferBytes;
using http_server_internal::kLingerTime;
using http_server_internal::kReadAheadBytes;
using http_server_internal::ToChrono;

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

}  // namespace pagoda::scheduler
