#ifndef PAGODA_WIRE_WORKER_TRANSPORT_H_
#define PAGODA_WIRE_WORKER_TRANSPORT_H_

// WorkerTransport: how a worker address is reached (unix socket, loopback TCP,
// network TCP), so the server and the worker pick matching credentials.

#include "absl/strings/string_view.h"

namespace pagoda::wire {

// How a worker's gRPC endpoint is reached, read from its address: the
// worker's --listen, or what the server dials. Both sides choose their gRPC
// credentials from it, so they agree:
//   kUnixSocket, kLoopbackTcp: local credentials (UDS, LOCAL_TCP), on which
//     the worker's auth processor checks the secret from a call's headers
//     before gRPC reads its message;
//   kNetworkTcp: plaintext unless TLS is configured, where the secret is only
//     checked after the whole message has arrived.
enum class WorkerTransport {
  kUnixSocket,   // "unix:PATH".
  kLoopbackTcp,  // Host 127.0.0.1, ::1 ("[::1]:PORT") or localhost.
  kNetworkTcp,   // Any other: 0.0.0.0, [::], 127.0.0.2, an interface, a DNS name.
};

// The transport of `address` ("unix:PATH" or "HOST:PORT"). Loopback is what
// gRPC's local credentials take on TCP, which is narrower than the kernel's
// loopback: gRPC 1.51 closes a connection to 127.0.0.2. An address this
// cannot read as loopback (other 127.x.y.z, IPv4-mapped ::ffff:127.0.0.1, a
// scheme such as "ipv4:", no port) is kNetworkTcp: the choice that still
// connects.
WorkerTransport WorkerTransportOf(absl::string_view address);

}  // namespace pagoda::wire

#endif  // PAGODA_WIRE_WORKER_TRANSPORT_H_
