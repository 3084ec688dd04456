#ifndef PAGODA_SCHEDULER_API_HTTP_EXCHANGE_H_
#define PAGODA_SCHEDULER_API_HTTP_EXCHANGE_H_

// The interface between the HTTP connection code and the routes: one parsed
// request, and the response object a route fills, streams and finishes.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "boost/asio/any_io_executor.hpp"
#include "scheduler/api/background_lane.h"

namespace pagoda::scheduler {

// One parsed HTTP request, body read whole (and bounded) by the connection.
struct HttpRequest {
  std::string method;         // "GET", "POST", ...
  std::string path;           // The target without its query string.
  std::string authorization;  // The Authorization header, "" if absent.
  std::string body;
  // Holds the body's share of the server's body-bytes budget: keep it as
  // long as the body (or what it is parsed into) is held.
  std::shared_ptr<void> budget;
};

// A response that takes its time (a completion): the connection keeps it
// while its exchange is open and tells it when the client leaves first.
class HttpCall {
 public:
  virtual ~HttpCall() = default;
  // The client closed the connection, or was dropped (too slow to read its
  // stream): abort the work. Called on the exchange's executor, at most once.
  virtual void OnClientGone() = 0;
};

// The answering side of one request on one connection. Every method but
// background() must be called on executor() (the connection's strand), so a
// connection's bytes are only ever touched by one thread at a time. An
// exchange ends with exactly one Respond or one StartEventStream ...
// EndEventStream; calls after the client left are ignored.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  virtual boost::asio::any_io_executor executor() = 0;
  // Keeps `call` alive until the exchange ends; OnClientGone if the client
  // leaves first.
  virtual void Attach(std::shared_ptr<HttpCall> call) = 0;
  // A whole response (Content-Length); ends the exchange.
  virtual void Respond(int status, absl::string_view content_type, std::string body) = 0;
  // A 200 text/event-stream response, sent chunk by chunk as events come.
  virtual void StartEventStream() = 0;
  // Queues `data` for the client. False when the client is gone, or when
  // more than the connection's stream buffer would wait for a client that
  // stopped reading: the connection is then closed and the call told.
  virtual bool SendEvent(absl::string_view data) = 0;
  // Ends the stream (the last chunk); ends the exchange once written.
  virtual void EndEventStream() = 0;
  // While held, what Respond and SendEvent queue waits, to leave in one
  // write at ReleaseWrites: a burst of events (the deltas the engine made
  // while the loop was busy) costs one system call, not one each.
  virtual void HoldWrites() = 0;
  virtual void ReleaseWrites() = 0;
  // Thread-safe, and lives as long as the loop of executor(): the io loop's
  // lane for work that may wait (a stream's events after its first), which
  // then never delays another request's read or first token. Its work runs
  // on no strand: it dispatches itself to executor().
  virtual BackgroundLane& background() = 0;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_HTTP_EXCHANGE_H_
