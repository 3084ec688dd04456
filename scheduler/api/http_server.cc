#include "scheduler/api/http_server.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "boost/asio/dispatch.hpp"
#include "boost/asio/post.hpp"
#include "glog/logging.h"
#include "scheduler/api/http_request_head.h"
#include "scheduler/api/http_session.h"
#include "scheduler/api/request_duration_buckets.h"

namespace pagoda::scheduler {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using http_server_internal::kListenBacklog;

}  // namespace

void HttpServerCore::Record(absl::string_view path, int status, absl::Duration elapsed) {
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

void HttpServerCore::Accept() {
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

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(HttpServerOptions options,
                                                              RequestPath* path,
                                                              ChatRenderer chat) {
  if (options.max_connections < 1) {
    return absl::InvalidArgumentError("HTTP: max_connections must be >= 1");
  }
  if (absl::Status threads = CheckHttpIoThreads(options.io_threads); !threads.ok()) {
    return threads;
  }
  if (path != nullptr) options.api_key = path->api_key();
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->core_ = std::make_unique<HttpServerCore>(std::move(options), path, std::move(chat));
  HttpServerCore& core = *server->core_;
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
  // Tokenizing work these routes handed to the request path's pool posts
  // to the stopped loop, where it is dropped with the loop; it must have
  // run before the loop (and the routes it calls back) are gone.
  core_->routes->StopPool();
}

}  // namespace pagoda::scheduler
