// What a client sends to the HTTP port, up to the request the routes are
// handed: Beast's request parser with the server's limits
// (LimitRequestParser), the server's decisions on the head and on body
// errors (DecideOnHead, DecideOnBodyError: parse errors, header count,
// route and method, API key), the request handed on (ToHttpRequest) and the
// error body of every refusal (HttpErrorBody), all from
// scheduler/api/http_request_head.h, driven the way HttpSession drives them:
// the head parsed from what has arrived so far, then the body eagerly, piece
// by piece, then the next pipelined request while the connection is kept.
// The bodies themselves go on to the OpenAI parsers (api_request fuzzer).
//
// Input: a settings byte (bit 0: an API key is configured; bit 1: small
// limits, so that 413 and 431 are in reach), a byte that says how much of
// the rest arrives in the first read, then the bytes of the connection.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "boost/asio/buffer.hpp"
#include "boost/beast/http/error.hpp"
#include "nlohmann/json.hpp"
#include "scheduler/api/http_request_head.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

namespace http = boost::beast::http;
using pagoda::fuzz::Check;
using pagoda::scheduler::HttpRequestParser;
using pagoda::scheduler::HttpServerOptions;
using pagoda::scheduler::RequestDecision;

constexpr char kApiKey[] = "fuzz-key";

HttpServerOptions Options(uint8_t settings) {
  HttpServerOptions options;
  if (settings & 1) options.api_key = kApiKey;
  if (settings & 2) {
    options.max_header_bytes = 256;
    options.max_body_bytes = 64;
    options.max_header_count = 4;
  }
  return options;
}

// The bytes of the connection as the server reads them: `arrived` of them
// so far; the client half-closes after the last.
struct Connection {
  std::string_view bytes;
  size_t arrived = 0;
  size_t consumed = 0;

  std::string_view Unread() const { return bytes.substr(consumed, arrived - consumed); }
  // A read: false at the end of the stream (the server sees EOF).
  bool ReadMore() {
    if (arrived == bytes.size()) return false;
    arrived = bytes.size();
    return true;
  }
};

// A refusal: a status the server has a reason phrase for, and an error
// body that is JSON naming it, whatever bytes the message quotes.
void CheckRefusal(const RequestDecision& decision) {
  const int status = decision.status;
  Check(status == 400 || status == 401 || status == 404 || status == 405 || status == 413 ||
            status == 431,
        "a refusal's status is one the head rules give");
  const std::string body = pagoda::scheduler::HttpErrorBody(status, decision.message);
  const nlohmann::json parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  Check(parsed.is_object() && parsed.contains("error") && parsed["error"].is_object() &&
            parsed["error"].value("code", 0) == status,
        "the error body is JSON that names the status");
}

// A head the server goes on with names a route, with a method it takes,
// and carries the key where one is needed.
void CheckAccepted(const HttpServerOptions& options, const HttpRequestParser& parser,
                   const RequestDecision& decision) {
  const auto& header = parser.get();
  Check(decision.route != "other" && !decision.route.empty(), "an accepted head names a route");
  const std::string_view method(header.method_string().data(), header.method_string().size());
  Check(method == "GET" || method == "POST", "an accepted head's method is GET or POST");
  size_t fields = 0;
  for (auto it = header.begin(); it != header.end(); ++it) ++fields;
  Check(fields <= static_cast<size_t>(options.max_header_count), "header fields bounded");
  const std::string_view target(header.target().data(), header.target().size());
  if (!options.api_key.empty() && target.starts_with("/v1/")) {
    const auto authorization = header[http::field::authorization];
    Check(std::string_view(authorization.data(), authorization.size()) ==
              std::string("Bearer ") + kApiKey,
          "an accepted /v1/ call carries the key");
  }
}

// HttpSession::ParseHeader: the head from what has arrived, reading more
// while it is incomplete.
boost::beast::error_code ParseHead(Connection& connection, HttpRequestParser& parser) {
  for (;;) {
    boost::beast::error_code error;
    const std::string_view unread = connection.Unread();
    if (!unread.empty()) {
      connection.consumed += parser.put(boost::asio::buffer(unread.data(), unread.size()), error);
      if (error == http::error::need_more) error = {};
    }
    if (error || parser.is_header_done()) return error;
    if (!connection.ReadMore()) return http::error::end_of_stream;
  }
}

// HttpSession::ReadBody: the body, eagerly, piece by piece as it arrives.
boost::beast::error_code ReadBody(Connection& connection, HttpRequestParser& parser) {
  parser.eager(true);
  while (!parser.is_done()) {
    boost::beast::error_code error;
    bool progressed = false;
    while (!connection.Unread().empty() && !parser.is_done()) {
      const std::string_view unread = connection.Unread();
      const size_t used = parser.put(boost::asio::buffer(unread.data(), unread.size()), error);
      connection.consumed += used;
      progressed |= used > 0;
      if (error || used == 0) break;
    }
    if (error == http::error::need_more || error == http::error::need_buffer) error = {};
    if (error) return error;
    if (!progressed && !parser.is_done() && !connection.ReadMore()) {
      return boost::asio::error::eof;
    }
  }
  return {};
}

// One request of the connection; false when the server closes it after.
bool ServeOne(const HttpServerOptions& options, Connection& connection) {
  HttpRequestParser parser;
  pagoda::scheduler::LimitRequestParser(options, parser);
  const boost::beast::error_code head_error = ParseHead(connection, parser);
  const RequestDecision decision = pagoda::scheduler::DecideOnHead(options, head_error, parser);
  if (decision.action == RequestDecision::Action::kRefuse) CheckRefusal(decision);
  if (decision.action != RequestDecision::Action::kContinue) return false;
  CheckAccepted(options, parser, decision);
  const bool keep_alive = parser.get().keep_alive();
  const auto length = parser.content_length();  // boost::optional
  if (const boost::beast::error_code error = ReadBody(connection, parser); error) {
    const RequestDecision body = pagoda::scheduler::DecideOnBodyError(options, error);
    if (body.action == RequestDecision::Action::kRefuse) CheckRefusal(body);
    Check(body.action != RequestDecision::Action::kContinue, "a body error ends the exchange");
    return false;
  }
  const pagoda::scheduler::HttpRequest request = pagoda::scheduler::ToHttpRequest(parser.release());
  Check(request.body.size() <= options.max_body_bytes, "the body is bounded");
  Check(!length.has_value() || request.body.size() == *length, "the body has its length");
  Check(request.path.find('?') == std::string::npos, "the path has no query");
  return keep_alive;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const HttpServerOptions options = Options(data[0]);
  Connection connection;
  connection.bytes = pagoda::fuzz::AsText(data + 2, size - 2);
  connection.arrived = std::min(connection.bytes.size(), connection.bytes.size() * data[1] / 255);
  // Pipelined requests, each answered before the next is read (at most 64:
  // every one consumes bytes, but a bound keeps a run's time plain).
  for (int served = 0; served < 64 && ServeOne(options, connection); ++served) {
  }
  return 0;
}
