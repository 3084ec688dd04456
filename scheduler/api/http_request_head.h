#ifndef PAGODA_SCHEDULER_API_HTTP_REQUEST_HEAD_H_
#define PAGODA_SCHEDULER_API_HTTP_REQUEST_HEAD_H_

// The HTTP server's rules for the bytes of one request, apart from the
// connection that carries them: the parser's limits, what the server does
// once a head is parsed (or fails to parse) before any body byte is read,
// what it does with an error while reading the body, and the request the
// routes are handed. HttpSession (http_server.cc) applies these to every
// request; the http_request fuzzer (tests/fuzz) drives them with hostile
// bytes. Pure functions of their arguments; thread-safe.

#include <string>

#include "boost/beast/core/error.hpp"
#include "boost/beast/http/message.hpp"
#include "boost/beast/http/parser.hpp"
#include "boost/beast/http/string_body.hpp"
#include "scheduler/api/http_exchange.h"
#include "scheduler/api/http_server_options.h"

namespace pagoda::scheduler {

using HttpRequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// Gives a fresh `parser` the server's limits: max_header_bytes for the
// request line and headers, max_body_bytes for the body (431 and 413 past
// them, see DecideOnHead and DecideOnBodyError).
void LimitRequestParser(const HttpServerOptions& options, HttpRequestParser& parser);

// What the server does with a request at a decision point.
struct RequestDecision {
  enum class Action {
    kClose,     // The client left or the connection ended: close, answer nothing.
    kRefuse,    // Answer `status` with HttpErrorBody(status, message), then close.
    kContinue,  // Go on: read the body, or hand the request to the routes.
  };
  Action action = Action::kContinue;
  int status = 0;       // kRefuse only: 400, 401, 404, 405, 413 or 431.
  std::string message;  // kRefuse only; may quote the request's method and path.
  // The metrics label of the path (OpenAiRoutes::RouteLabel); empty when the
  // head did not parse.
  std::string route;
};

// Once the head is parsed, or reading or parsing it failed with `error`:
// parse and read errors, the header-field count, the route and method
// (OpenAiRoutes::Routable) and the API key (OpenAiRoutes::Authorized), in
// that order. kContinue: the body (if any) may be read.
// REQUIRES: `error` is set or parser.is_header_done().
RequestDecision DecideOnHead(const HttpServerOptions& options, boost::beast::error_code error,
                             const HttpRequestParser& parser);

// After reading or parsing part of a body failed with `error` (set):
// 413 past max_body_bytes, kClose when the client left or the connection
// ended, 400 for a malformed body (bad chunk, bad length).
RequestDecision DecideOnBodyError(const HttpServerOptions& options,
                                  boost::beast::error_code error);

// The request the routes are handed: method, path (the target without its
// query), Authorization, body (moved). The body budget is the caller's.
HttpRequest ToHttpRequest(boost::beast::http::request<boost::beast::http::string_body> message);

// The body of an error response: OpenAI's error object, as JSON. Bytes of
// `message` that are not UTF-8 (a path may hold any byte above 0x7F) are
// replaced, never a reason to fail.
std::string HttpErrorBody(int status, const std::string& message);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_HTTP_REQUEST_HEAD_H_
