#include "scheduler/api/http_request_head.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "boost/asio/error.hpp"
#include "boost/beast/http/error.hpp"
#include "nlohmann/json.hpp"
#include "scheduler/api/openai_protocol.h"
#include "scheduler/api/openai_routes.h"

namespace pagoda::scheduler {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;

RequestDecision Refuse(int status, std::string message, std::string route = "") {
  return {RequestDecision::Action::kRefuse, status, std::move(message), std::move(route)};
}

RequestDecision CloseQuietly() { return {RequestDecision::Action::kClose, 0, "", ""}; }

// The client left, or the connection ended or was closed by the server
// (operation_aborted): nothing to answer.
bool ConnectionEnded(beast::error_code error) {
  return error == http::error::end_of_stream || error == asio::error::eof ||
         error == asio::error::operation_aborted || error == asio::error::connection_reset;
}

absl::string_view View(beast::string_view text) {
  return absl::string_view(text.data(), text.size());
}

}  // namespace

void LimitRequestParser(const HttpServerOptions& options, HttpRequestParser& parser) {
  parser.header_limit(static_cast<std::uint32_t>(options.max_header_bytes));
  parser.body_limit(options.max_body_bytes);
}

RequestDecision DecideOnHead(const HttpServerOptions& options, beast::error_code error,
                             const HttpRequestParser& parser) {
  if (error == http::error::header_limit || error == http::error::buffer_overflow) {
    return Refuse(431, absl::StrCat("request headers over ", options.max_header_bytes, " bytes"));
  }
  if (error == http::error::body_limit) {
    return Refuse(413, absl::StrCat("body over ", options.max_body_bytes, " bytes"));
  }
  if (ConnectionEnded(error)) return CloseQuietly();
  if (error) return Refuse(400, absl::StrCat("malformed request: ", error.message()));
  const auto& header = parser.get();
  const absl::string_view target = View(header.target());
  const absl::string_view path = target.substr(0, target.find('?'));
  std::string route(OpenAiRoutes::RouteLabel(path));
  size_t fields = 0;
  for (auto it = header.begin(); it != header.end(); ++it) ++fields;
  if (fields > static_cast<size_t>(options.max_header_count)) {
    return Refuse(431, absl::StrCat("more than ", options.max_header_count, " header fields"),
                  std::move(route));
  }
  const absl::string_view method = View(header.method_string());
  int status = 0;
  if (!OpenAiRoutes::Routable(method, path, &status)) {
    return Refuse(status,
                  absl::StrCat(method, " ", path, ": ",
                               status == 404 ? "no such route" : "method not allowed"),
                  std::move(route));
  }
  // Checked before the body is read: a refused call costs no body.
  if (!OpenAiRoutes::Authorized(options.api_key, path,
                                View(header[http::field::authorization]))) {
    return Refuse(401, "missing or wrong API key: send 'Authorization: Bearer <key>'",
                  std::move(route));
  }
  return {RequestDecision::Action::kContinue, 0, "", std::move(route)};
}

RequestDecision DecideOnBodyError(const HttpServerOptions& options, beast::error_code error) {
  if (error == http::error::body_limit) {
    return Refuse(413, absl::StrCat("body over ", options.max_body_bytes, " bytes"));
  }
  if (ConnectionEnded(error) || error == http::error::partial_message) return CloseQuietly();
  return Refuse(400, absl::StrCat("malformed request body: ", error.message()));
}

HttpRequest ToHttpRequest(http::request<http::string_body> message) {
  HttpRequest request;
  request.method = std::string(message.method_string());
  const absl::string_view target = View(message.target());
  request.path = std::string(target.substr(0, target.find('?')));
  request.authorization = std::string(message[http::field::authorization]);
  request.body = std::move(message.body());
  return request;
}

std::string HttpErrorBody(int status, const std::string& message) {
  return MakeOpenAiError(status, message)
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace pagoda::scheduler
