#include "wire/worker_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace pagoda::wire {
namespace {

// The host of "HOST:PORT" or "[HOST]:PORT"; empty when there is no port.
absl::string_view HostOfTcpAddress(absl::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return {};
  absl::string_view host = address.substr(0, colon);
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

// gRPC's local credentials accept exactly these on TCP: 127.0.0.1 and ::1
// (localhost resolves to them), not the rest of 127.0.0.0/8.
bool IsLoopbackHost(absl::string_view host) {
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  const std::string text(host);
  if (in_addr v4; inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    return ntohl(v4.s_addr) == INADDR_LOOPBACK;
  }
  in6_addr v6;
  return inet_pton(AF_INET6, text.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

}  // namespace

WorkerTransport WorkerTransportOf(absl::string_view address) {
  if (absl::StartsWith(address, "unix:")) return WorkerTransport::kUnixSocket;
  return IsLoopbackHost(HostOfTcpAddress(address)) ? WorkerTransport::kLoopbackTcp
                                                   : WorkerTransport::kNetworkTcp;
}

}  // namespace pagoda::wire
