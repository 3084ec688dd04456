// HttpPageServer: a minimal HTTP/1.x server of one read-only page (the
// worker's /metrics), on one thread of an ordinary stack.
//
// Why not civetweb (prometheus::Exposer), as the server uses: civetweb starts
// its threads with a fixed 100 KiB stack, and glibc refuses to create a thread
// whose stack cannot hold the process's static TLS. pagoda-worker links the
// CUDA libraries, whose static TLS (cublasLt alone: 92 KiB) leaves no room,
// so every Exposer in the worker failed with "null context when constructing
// CivetServer" (issue 44), whatever the port.
#ifndef PAGODA_WORKER_HTTP_PAGE_SERVER_H_
#define PAGODA_WORKER_HTTP_PAGE_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace pagoda::worker {

// GET (or HEAD) `path` answers 200 with `body()` as `content_type`; another
// path 404, another method 405; every answer closes the connection. Clients
// are served one at a time, each within a deadline (a silent or endless
// request is dropped), and a request head over 8 KiB is refused (431).
// `body` is called from the server's thread and must stay callable until
// this object is gone.
class HttpPageServer {
 public:
  struct Page {
    std::string path;
    std::string content_type;
    std::function<std::string()> body;
  };

  // Listens on host:port (a numeric IPv4 or IPv6 address, brackets allowed,
  // or a name such as localhost; port 0 = the OS picks, see port()).
  // UNAVAILABLE naming the address when it cannot be bound, "port in use"
  // when another socket holds it.
  static absl::StatusOr<std::unique_ptr<HttpPageServer>> Start(const std::string& host, int port,
                                                               Page page);
  // Stops serving and closes the port before returning.
  ~HttpPageServer();
  HttpPageServer(const HttpPageServer&) = delete;
  HttpPageServer& operator=(const HttpPageServer&) = delete;

  int port() const { return port_; }

 private:
  HttpPageServer(int listen_fd, int stop_fd, int port, Page page);
  void Serve();
  void Answer(int client);

  const int listen_fd_;
  const int stop_fd_;  // An eventfd: readable once the destructor runs.
  const int port_;
  const Page page_;
  std::thread thread_;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_HTTP_PAGE_SERVER_H_
