#ifndef PAGODA_SCHEDULER_API_HTTP_CONNECTION_H_
#define PAGODA_SCHEDULER_API_HTTP_CONNECTION_H_

#include <string>
#include <vector>

namespace pagoda::scheduler {

// The server's socket of one client's HTTP connection, so that a handler that
// waits for the engine can notice the client leaving, and a draining server
// can end connections that outlive the drain.
//
// Why a search: cpp-httplib 0.11 (Debian's) gives a handler the connection's
// addresses but not its socket, and has no "connection closed" query. A TCP
// connection is unique by its local port and peer address and port, and
// while a handler runs its thread holds the socket open, so the descriptor
// found stays this connection's until the handler returns.
// Thread-compatible; the object does not own the descriptor.
class HttpConnection {
 public:
  // Finds the socket connected to local port `local_port` from
  // `remote_addr`:`remote_port` (numeric host, as cpp-httplib writes it) among
  // this process's descriptors. Not found (a TLS or odd transport): an object
  // whose PeerClosed() is always false.
  static HttpConnection Find(int local_port, const std::string& remote_addr, int remote_port);

  // Every connection accepted on `local_port` that is still open in this
  // process (the server's side; this process is not its own client).
  static std::vector<HttpConnection> AllOnPort(int local_port);

  bool found() const { return fd_ >= 0; }
  // True once the client closed its end or reset the connection. Reads
  // nothing (a peek), so pipelined bytes stay for the server.
  bool PeerClosed() const;
  // Shuts the connection down both ways: blocked reads and writes on it
  // return, and the client sees the connection end.
  void ShutDown() const;

 private:
  explicit HttpConnection(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_HTTP_CONNECTION_H_
